"""``kill -9`` in the middle of a soak (bench/soak.py --kills): during rollouts, a running job and an
adapter's first load, with trace ingest all along. After each restart nothing acknowledged is lost
(trace batches, logged trajectories, checkpoints and their files), the job running at the kill failed
with its ``training_failed`` event, both databases pass ``PRAGMA integrity_check``, and the soak goes
on (rollouts after the last kill are answered); the memory samples go on across the restarts."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from bench_script import run_bench

from support.soak_support import figures, memory_report


def test_three_kills_lose_nothing_acknowledged_and_the_soak_goes_on() -> None:
    out = run_bench(
        "soak.py", "--smoke", "--requests", "200", "--kills", "3", "--kill-every", "8", timeout=900
    )
    f = figures(out)
    assert f["kills"] == 3 and f["failed_checks"] == 0, out
    reports = re.findall(r"^kill (\d) during (.+?): (\d+) trace batches, (\d+) logged .*$", out, re.M)
    assert [(n, what.split(" (")[0]) for n, what, _, _ in reports] == [
        ("1", "rollouts"),
        ("2", "job"),
        ("3", "adapter load"),
    ], out
    assert all(line.endswith(": ok") for line in re.findall(r"^kill \d during .*$", out, re.M))
    job_line = next(line for line in out.splitlines() if line.startswith("kill 2 during job"))
    # held before its commit (the soak's hold file), the job ran at the kill: it failed, with its event
    assert job_line.endswith("the job running: failed, last event training_failed: ok"), job_line
    rounds, answered = re.search(
        r"^after the last kill: (\d+) whole rounds, (\d+) answered", out, re.M
    ).groups()
    assert int(rounds) >= 1 and int(answered) >= 16  # the soak went on: a whole round without an error
    assert f["succeeded"] >= 1
    # sampled across the restarts: the first process's samples, then later ones', each process's together
    pids = [json.loads(line)["pid"] for line in memory_report(out)["path"].read_text().splitlines()]
    assert len(set(pids)) >= 2 and pids == sorted(pids, key=pids.index), pids
