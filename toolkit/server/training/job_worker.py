"""A background worker that runs queued work in order, off the request path."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("toolkit.jobs")


@dataclass
class Probe:
    success: bool
    duration_ms: float
    error: str | None = None


class JobWorker:
    """One worker thread; work items run one at a time in submission order."""

    def __init__(self, name: str = "jobs") -> None:
        self._queue: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name=f"toolkit-{name}", daemon=True)
        self._thread.start()

    def submit(self, work: Callable[[], None]) -> None:
        self._queue.put(work)

    def pending(self) -> int:
        return self._queue.qsize()

    def probe(self, timeout: float = 0.5) -> Probe:
        """Whether the worker is alive and answers; it may be busy training, which counts as alive."""
        start = time.perf_counter()
        if not self._thread.is_alive():
            return Probe(False, 0.0, "worker thread is not running")
        return Probe(True, (time.perf_counter() - start) * 1000)

    def _run(self) -> None:
        while True:
            work = self._queue.get()
            if work is None:
                return
            try:
                work()
            except Exception:  # a failing job must not kill the worker
                log.exception("background job failed")

    def stop(self, timeout: float = 5.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout)
