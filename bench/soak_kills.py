"""The soak's kills (``--kills N``): ``kill -9`` of the server at a moment of the mix chosen in turn,
the databases' integrity checked, a restart on the same folder and port, everything acknowledged
read back; the mix waits meanwhile and goes on."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import httpx
from soak_checks import integrity, read_back
from soak_mix import Mix


class Killer:
    def __init__(self, mix: Mix, kill_every: float) -> None:
        self.mix, self.kill_every = mix, kill_every
        self.stalls_before = 0  # watchdog counts of the earlier server processes
        self.reports: list[str] = []
        self.failures: list[str] = []
        self.answered_at_kill = 0

    def run(self, kills: int) -> None:
        mix = self.mix
        moments: list[tuple[str, Callable[[], bool]]] = [
            ("rollouts", lambda: mix.in_rollouts.wait(120)),
            ("job", self.job_held),
            ("adapter load", lambda: mix.new_adapter.wait(120)),
            ("trace ingest", lambda: mix.ingesting.wait(120)),
        ]
        share = mix.size.seconds / (kills + 1)
        for i in range(kills):
            if mix.stop.is_set():
                return
            time.sleep(mix.rng.uniform(0.2, 1.0) * min(share, self.kill_every))
            what, arrived = moments[i % len(moments)]
            if not arrived():
                what = "rollouts (waited 120 s for the moment)"
            self.kill_and_check(i + 1, what)

    def job_held(self) -> bool:
        """Hold the next job before its commit and wait (120 s at most) until the server says one
        waits there: killed then, the job is running for sure."""
        server = self.mix.server
        server.hold.touch()
        deadline = time.monotonic() + 120
        while not server.held.exists():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def kill_and_check(self, n: int, what: str) -> None:
        mix, server = self.mix, self.mix.server
        with contextlib.suppress(httpx.HTTPError):
            self.stalls_before += server.stalls()
        running = mix.running_job
        mix.up.clear()
        mix.rounds_after_kill = 0
        self.answered_at_kill = len(mix.stats.latencies)
        server.kill()
        server.hold.unlink(missing_ok=True)
        server.held.unlink(missing_ok=True)  # the dead server's, had a job been waiting
        problems = [
            f"{db}: {r}"
            for db in ("toolkit.db", "traces.db")
            if (r := integrity(server.data_dir / db)) != "ok"
        ]
        server.start()
        acked = mix.acknowledged()
        found, job_note = read_back(server, acked, running)
        problems += found
        mix.up.set()
        report = (
            f"kill {n} during {what}: {len(acked.trace_batches)} trace batches, "
            f"{sum(acked.logged.values())} logged trajectories, {len(acked.checkpoints)} checkpoints checked"
            + (f", {job_note}" if running else "")
            + (f"; PROBLEMS: {problems}" if problems else ": ok")
        )
        print(report, flush=True)
        self.reports.append(report)
        self.failures += problems
        mix.kills_done += 1
