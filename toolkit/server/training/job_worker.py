"""The job worker: one background thread that runs queued work in submission order, off the
request path, and a health probe that tells an idle, a busy, a stuck and a dead worker apart."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..engine.resources import trim_heap

log = logging.getLogger("toolkit.jobs")

# A running job that shows no progress (``beat``) for this long counts as stuck. Generous: one
# gradient step of a large model on CPU, or loading it, may take minutes.
STALL_AFTER = 600.0

Work = Callable[[], None]


@dataclass
class Probe:
    success: bool
    duration_ms: float
    error: str | None = None


class JobWorker:
    """One worker thread; work items run one at a time in submission order."""

    def __init__(self, name: str = "jobs", stall_after: float = STALL_AFTER) -> None:
        self._queue: queue.Queue[Work | threading.Event | None] = queue.Queue()
        self._stall_after = stall_after
        self._lock = threading.Lock()
        self._ping: threading.Event | None = None
        self._running = False
        self._last_beat = time.monotonic()
        self._thread = threading.Thread(target=self._run, name=f"toolkit-{name}", daemon=True)
        self._thread.start()

    def submit(self, work: Work) -> None:
        self._queue.put(work)

    def beat(self) -> None:
        """Called by the running work item whenever it makes progress (each gradient step)."""
        self._last_beat = time.monotonic()

    def probe(self, timeout: float = 0.5) -> Probe:
        """Alive when the idle worker answers a ping within ``timeout``, or when the job it runs
        showed progress in the last ``stall_after`` seconds (busy counts as alive). A dead thread,
        an unanswered ping and a job without progress are failures. Never blocks longer than
        ``timeout``."""
        start = time.monotonic()

        def result(success: bool, error: str | None = None) -> Probe:
            return Probe(success, (time.monotonic() - start) * 1000, error)

        if not self._thread.is_alive():
            return result(False, "the job worker thread is not running")
        if not self._running and self._pinged().wait(timeout):
            return result(True)
        if not self._thread.is_alive():
            return result(False, "the job worker thread is not running")
        if self._running:
            quiet = time.monotonic() - self._last_beat
            if quiet <= self._stall_after:
                return result(True)
            return result(False, f"the running job has shown no progress for {quiet:.0f} s")
        return result(False, f"the job worker did not answer within {timeout:g} s")

    def _pinged(self) -> threading.Event:
        """The pending ping (at most one waits in the queue), sent now if none is."""
        with self._lock:
            if self._ping is None:
                self._ping = threading.Event()
                self._queue.put(self._ping)
            return self._ping

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if isinstance(item, threading.Event):
                with self._lock:
                    self._ping = None
                item.set()
                continue
            self._running = True
            self.beat()
            try:
                item()
            except Exception:  # a failing job must not kill the worker
                log.exception("background job failed")
            finally:
                self._running = False
                trim_heap()  # what a failed job left goes back to the system too

    def stop(self, timeout: float = 5.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout)
