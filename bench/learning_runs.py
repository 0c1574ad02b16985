"""What the learning benchmarks (learn_reverse.py, learn_agent.py, learn_tasks.py) share: a client of a
given server or of a local server of their own in a temporary folder, what a run costs phase by phase
(:class:`Watch`), and their section of docs/performance.md rewritten in place."""

from __future__ import annotations

import os
import re
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
from server_process import start_server

import toolkit as tk

ROOT = Path(__file__).resolve().parent.parent


@contextmanager
def learning_server(
    url: str | None, key: str | None, prefix: str, args: Sequence[str] = ()
) -> Iterator[tuple[tk.Client, int | None]]:
    """A client of the server at ``url``, or of a server of its own (``toolkit serve *args``) in a
    temporary folder (removed after); and the server's pid where it is known (its own, or one on this
    machine that answers ``/v1/diagnostics/memory`` to ``key``, the local key), else None."""
    if url:
        with tk.Client(url, key) as client:
            yield client, local_pid(url, key)
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as folder:
        proc, url, key = start_server(Path(folder), args=args, timeout=300)
        try:
            with tk.Client(url, key) as client:
                yield client, proc.pid
        finally:
            proc.terminate()
            proc.wait(60)


@contextmanager
def learning_client(url: str | None, key: str | None, prefix: str) -> Iterator[tk.Client]:
    """:func:`learning_server`'s client alone, of a server serving the built-in models."""
    with learning_server(url, key, prefix) as (client, _):
        yield client


def local_pid(url: str, key: str | None) -> int | None:
    """The pid of the server at ``url`` if it runs on this machine and ``key`` is its local key."""
    try:
        answer = httpx.get(
            f"{url}/v1/diagnostics/memory",
            params={"top": 1},
            timeout=60,
            headers={"Authorization": f"Bearer {key}"},
        )
        pid = int(answer.json()["pid"]) if answer.status_code == 200 else None
    except (httpx.HTTPError, ValueError, KeyError):
        return None
    return pid if pid is not None and psutil.pid_exists(pid) else None


@dataclass
class Phase:
    """What one phase of a run cost, over all its spans: wall and CPU seconds (the server's and this
    process's), the 1-minute load average (mean of the samples taken during it, else at its ends) and
    the server's peak RSS."""

    wall: float = 0.0
    cpu: float = 0.0
    loads: list[float] = field(default_factory=list)
    rss_peak: int = 0

    @property
    def load(self) -> float:
        return sum(self.loads) / len(self.loads) if self.loads else 0.0


class Watch:
    """Samples the machine's load and the server's RSS every ``every`` seconds in a thread, and what each
    phase of a run costs (``with watch.phase("sft"): ...``). Without a pid the CPU time is this
    process's alone and the RSS 0."""

    def __init__(self, pid: int | None, every: float = 2.0) -> None:
        self.server = psutil.Process(pid) if pid is not None else None
        self.phases: dict[str, Phase] = {}
        self.rss: list[tuple[float, int]] = []  # (seconds since the start, bytes)
        self.started = time.perf_counter()
        self._current: list[Phase] = []
        self._stop = threading.Event()
        self._every = every
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def memory(self) -> int:
        """The server's RSS now, in bytes (0 without a pid or once it is gone)."""
        try:
            return self.server.memory_info().rss if self.server else 0
        except psutil.Error:
            return 0

    def _cpu(self) -> float:
        total = sum(psutil.Process().cpu_times()[:2])
        try:
            return total + (sum(self.server.cpu_times()[:2]) if self.server else 0.0)
        except psutil.Error:
            return total

    def _sample(self) -> None:
        while not self._stop.wait(self._every):
            rss, load = self.memory(), os.getloadavg()[0]
            self.rss.append((time.perf_counter() - self.started, rss))
            for phase in list(self._current):
                phase.loads.append(load)
                phase.rss_peak = max(phase.rss_peak, rss)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        phase = self.phases.setdefault(name, Phase())
        wall, cpu = time.perf_counter(), self._cpu()
        if not phase.loads:
            phase.loads.append(os.getloadavg()[0])
        self._current.append(phase)
        try:
            yield
        finally:
            self._current.remove(phase)
            phase.wall += time.perf_counter() - wall
            phase.cpu += self._cpu() - cpu
            phase.rss_peak = max(phase.rss_peak, self.memory())

    def now(self) -> float:
        """Seconds since the watch started, the time axis of :attr:`rss`."""
        return time.perf_counter() - self.started

    def close(self) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def rss_peak(self) -> int:
        return max((rss for _, rss in self.rss), default=self.memory())


def write_section(section: str, text: str) -> None:
    """Replace the ``section`` heading's part of docs/performance.md, up to the next heading (a
    subsection too, which stays), with ``text``; or append it."""
    path = ROOT / "docs" / "performance.md"
    current = path.read_text() if path.exists() else "# Performance\n"
    pattern = re.compile(rf"{re.escape(section)}\n.*?(?=\n##+ |\Z)", re.S)
    if pattern.search(current):
        updated = pattern.sub(lambda _: text.rstrip("\n") + "\n", current)
    else:
        updated = current.rstrip("\n") + "\n\n" + text
    path.write_text(updated.rstrip("\n") + "\n")


def costs(watch: Watch | None) -> str:
    """A Markdown table of what each phase of a run cost (:class:`Watch`), and the server's peak RSS."""
    if watch is None:
        return ""
    rows = "\n".join(
        f"| {name} | {p.wall:.0f} | {p.cpu:.0f} | {p.load:.1f} | {p.rss_peak / 2**30:.2f} |"
        for name, p in watch.phases.items()
    )
    return f"""| phase | wall s | CPU s (server + bench) | load (1 min, mean) | server peak RSS GiB |
|---|---|---|---|---|
{rows}"""
