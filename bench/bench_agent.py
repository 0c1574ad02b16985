"""How much of a multi-turn rollout is the rollout loop's own work, outside the model calls.

    .venv/bin/python bench/bench_agent.py [--episodes 64] [--write] [--smoke]

Code-lookup episodes (``toolkit.tasks.lookup``: the model calls ``get``, reads the result, answers;
up to 3 turns of at most 72 tokens at T=1) with the built-in model, through ``toolkit.rollouts.Agent``
against ``toolkit serve`` in a temporary folder. Every ``chat.completions.create`` of the client is
timed; the rest of each episode's wall time is the loop's: building requests, parsing choices, the
thread hop per model call, running the tool (a dict lookup here, so it is counted as loop time too),
scoring, the trajectory (tracing off). Sequential episodes (concurrency 1) give the fraction
cleanly; a run at concurrency 16 gives the throughput the loop reaches when calls overlap.
Prints a Markdown table; ``--write`` puts it in docs/performance.md ("## Agent rollouts").
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from learning_runs import write_section
from server_process import start_server

import toolkit as tk
from toolkit.tasks import lookup

SECTION = "## Agent rollouts"
MODEL = "toolkit/tiny-chat-1m"


class CallTimer:
    """Wraps a client's ``chat.completions.create``: the number of calls and their summed wall time."""

    def __init__(self, client: tk.Client) -> None:
        self.calls, self.seconds, self._lock = 0, 0.0, threading.Lock()
        create: Callable[..., Any] = client.chat.completions.create

        def timed(**request: Any) -> Any:
            started = time.perf_counter()
            try:
                return create(**request)
            finally:
                with self._lock:
                    self.calls += 1
                    self.seconds += time.perf_counter() - started

        client.chat.completions.create = timed  # type: ignore[method-assign]


def measure(client: tk.Client, episodes: int, concurrency: int) -> dict[str, float]:
    timer = CallTimer(client)
    agent = lookup.agent(client, MODEL)
    started = time.perf_counter()
    scenarios = lookup.scenarios(episodes, seed=concurrency)
    groups = agent.gather(scenarios, max_concurrency=concurrency, max_exceptions=0, progress=False)
    wall = time.perf_counter() - started
    turns = sum(t.metrics["turns"] for g in groups for t in g.trajectories)
    assert timer.calls == turns, (timer.calls, turns)
    return {"wall": wall, "model": timer.seconds, "turns": turns, "episodes": episodes}


def report(sequential: dict[str, float], concurrent: dict[str, float], episodes: int) -> str:
    outside = sequential["wall"] - sequential["model"]
    load = " / ".join(f"{v:.1f}" for v in os.getloadavg())
    rows = [
        ("episodes, sequential", f"{episodes}"),
        ("model turns, sequential", f"{sequential['turns']:.0f}"),
        ("wall s, sequential", f"{sequential['wall']:.2f}"),
        ("inside model calls s, sequential", f"{sequential['model']:.2f}"),
        ("outside model calls, % of wall", f"{100 * outside / sequential['wall']:.1f}"),
        ("outside model calls, ms per turn", f"{1000 * outside / max(1, sequential['turns']):.2f}"),
        ("episodes/s at concurrency 16", f"{concurrent['episodes'] / concurrent['wall']:.1f}"),
        ("turns/s at concurrency 16", f"{concurrent['turns'] / concurrent['wall']:.1f}"),
    ]
    table = "\n".join(f"| {name} | {value} |" for name, value in rows)
    return f"""{SECTION}

Produced by `.venv/bin/python bench/bench_agent.py --write` (load {load} at the end, 2 CPU cores; the
built-in model `{MODEL}` serving itself over loopback HTTP on the same cores). Code-lookup episodes
through `toolkit.rollouts.Agent`; every `chat.completions.create` is timed and the rest of the wall time
is the loop's own (requests, choices, thread hops, the tool, scoring; tracing off). `--smoke` runs a few
episodes and is run by `tests/bench/test_bench_agent.py`.

| measure | value |
|---|---|
{table}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="4 episodes each way, no write")
    args = parser.parse_args()
    episodes = 4 if args.smoke else args.episodes
    with tempfile.TemporaryDirectory(prefix="bench-agent-") as folder:
        proc, url, key = start_server(Path(folder))
        try:
            with tk.Client(url, key) as client:
                measure(client, 2, 1)  # warm-up: the model loads
                sequential = measure(client, episodes, 1)
                concurrent = measure(client, episodes, 16)
        finally:
            proc.terminate()
            proc.wait(30)
    text = report(sequential, concurrent, episodes)
    print(text)
    if args.write and not args.smoke:
        write_section(SECTION, text)


if __name__ == "__main__":
    main()
