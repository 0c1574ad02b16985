"""Soak of the embedded server: hours of the real mix at high concurrency, with the server's log kept.

- agent rollouts with a tool (the code-lookup task, ``toolkit.tasks.lookup``: a tool call, then the
  answer) through the sync client's :class:`~toolkit.rollouts.Agent`, on LoRA checkpoints of several
  models (every new checkpoint is an adapter loaded on its first request), their groups logged;
- SFT and RL jobs between the rounds of each model (its next round runs on the new checkpoint);
- trace ingest (batches of calls) all along;
- clients that go away mid-request, streamed and non-streamed.

It reports the chat requests, their p50/p99 latency, the stalls seen (the watchdog's count in
``/v1/health`` and requests slower than ``--slow-seconds`` or timed out on the client's side), the
server's RSS at the start and the end, and its memory sampled every ``--memory-every`` seconds
(``memory.jsonl`` and ``memory.svg`` beside ``server.log``: RSS, KV caches, adapters, parameters,
SQLite's page cache, Python's heap by type, glibc's free heap; the slope of RSS over the last hour).
``--kills N`` also ``kill -9``s the server N times at
random moments (during rollouts, a job (held before its commit by the server's test-only
``TOOLKIT_CHECKPOINT_PAUSE_FILE``, so it is still running), an adapter's first load, trace ingest),
restarts it on the
same data folder and port, and checks each time that nothing acknowledged is lost (trace batches,
logged trajectories, checkpoints of succeeded jobs and their files), that the jobs running at the kill
failed with their ``training_failed`` event, and that both databases pass ``PRAGMA integrity_check``;
then the soak goes on. It exits 1 when a check fails.

The parts: soak_server.py (the server process), soak_mix.py (the workers), soak_kills.py,
soak_checks.py (the read-back), soak_memory.py (the samples), soak_report.py.

    .venv/bin/python bench/soak.py --requests 200000 --seconds 3600
    .venv/bin/python bench/soak.py --requests 20000 --kills 20
    .venv/bin/python bench/soak.py --smoke [--kills 2]   # seconds; the test suite runs it
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from soak_checks import read_back
from soak_kills import Killer
from soak_memory import MemorySampler
from soak_mix import FULL, SMOKE, Mix
from soak_report import print_report
from soak_server import Server, free_port


def run(mix: Mix, killer: Killer, sampler: MemorySampler) -> None:
    """The mix until it is done (its requests or time, and every kill), the kills and the memory
    samples beside it."""
    threads = [threading.Thread(target=sampler.run, daemon=True)]
    threads[0].start()
    mix.setup()
    threads += [threading.Thread(target=f, daemon=True) for f in (mix.jobs, mix.ingest, mix.disconnects)]
    if mix.args.kills:
        threads.append(threading.Thread(target=killer.run, args=(mix.args.kills,), daemon=True))
    for t in threads[1:]:
        t.start()
    last = time.monotonic()
    roller = threading.Thread(target=mix.rollouts, daemon=True)
    roller.start()
    while roller.is_alive():
        roller.join(10)
        if time.monotonic() - last > 60:
            last = time.monotonic()
            print(f"  {mix.chat_count()} chat requests, {time.monotonic() - mix.started:.0f} s", flush=True)
    mix.stop.set()
    for t in threads:
        t.join(300)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="a small size (the test suite's)")
    parser.add_argument("--requests", type=int, help="chat requests to send (default 200,000; smoke 400)")
    parser.add_argument("--seconds", type=float, help="stop after this long (default 3600; smoke 240)")
    parser.add_argument("--concurrency", type=int, help="concurrent agent episodes (default 48; smoke 16)")
    parser.add_argument("--memory-every", type=float, help="seconds between memory samples (60; smoke 2)")
    parser.add_argument("--kills", type=int, default=0, help="kill -9 the server this many times")
    parser.add_argument("--kill-every", type=float, default=60, help="most seconds between two kills")
    parser.add_argument("--slow-seconds", type=float, default=30, help="a chat request slower is a stall")
    parser.add_argument("--client-timeout", type=float, default=120, help="the client's read timeout")
    parser.add_argument("--rollout-timeout", type=float, default=300, help="the agent's rollout timeout")
    parser.add_argument("--stall-warning-seconds", type=float, default=30, help="the server's watchdog")
    parser.add_argument("--data-dir", type=Path, help="the server's data folder (default: a new one, kept)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    size = SMOKE if args.smoke else FULL
    for name in ("requests", "seconds", "concurrency", "memory_every"):
        if getattr(args, name) is not None:
            setattr(size, name, getattr(args, name))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # so that the server is stopped too
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="toolkit-soak-"))
    data_dir.mkdir(parents=True, exist_ok=True)
    server = Server(data_dir, free_port(), ["--stall-warning-seconds", str(args.stall_warning_seconds)])
    command = " ".join(["bench/soak.py", *sys.argv[1:]])
    print(f"soak: {command}; data and server.log in {data_dir}", flush=True)
    server.start()
    mix = Mix(server, size, args)
    killer = Killer(mix, args.kill_every)
    sampler = MemorySampler(server, data_dir, size.memory_every, mix.up, mix.stop)
    start = time.monotonic()
    try:
        run(mix, killer, sampler)
        wall = time.monotonic() - start
        stalls = killer.stalls_before + server.stalls()
        rss_end = server.rss()
        final, _ = read_back(server, mix.acknowledged(), None)
        with server.http() as http:
            health = http.get("/v1/health").status_code
    finally:
        server.stop()
    failures = killer.failures + final
    memory = sampler.summary()
    print_report(
        mix, killer, failures, wall=wall, stalls=stalls, rss_end=rss_end, health=health, memory=memory
    )
    return 1 if failures or health != 200 else 0


if __name__ == "__main__":
    sys.exit(main())
