"""The watchdog: a thread that notices a chat request making no progress (no token sampled, no event
sent by its engine nor taken by its handler, and, while it waits for admission, no step of its
engine, for ``stall_seconds``) and logs one warning for it, with every
thread's stack, the engines' and schedulers' state and whether the event loop still answers, then
counts it (``stalls`` in ``/v1/health``)."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback

from .engine.served import ServedModels

log = logging.getLogger("toolkit.watchdog")


class Watchdog:
    def __init__(self, served: ServedModels, stall_seconds: float) -> None:
        self.served, self.stall_seconds = served, stall_seconds
        self.stalls = 0
        self._reported: set[tuple[int, float]] = set()  # (request, its last progress) already logged
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="toolkit-watchdog", daemon=True)

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        interval = min(1.0, self.stall_seconds / 4)
        while not self._stop.wait(interval):
            try:
                self.check()
            except Exception:  # the watchdog must outlive whatever it watches
                log.exception("watchdog check failed")

    def check(self) -> int:
        """Log the requests that stalled since the last check (one warning for all); their number."""
        now = time.monotonic()
        live: set[tuple[int, float]] = set()
        stalled = []
        for engine in self.served.engines:
            for req in engine.live():
                key = (id(req), engine.progressed_at(req))
                live.add(key)
                if now - key[1] >= self.stall_seconds and key not in self._reported:
                    stalled.append((req, key[1]))
                    self._reported.add(key)
        self._reported &= live
        if stalled:
            self.stalls += len(stalled)
            names = ", ".join(f"{r.id} ({now - at:.0f} s)" for r, at in stalled)
            log.warning(
                "stall: %d chat request(s) without progress for %g s or more: %s\n%s\n%s\n%s",
                len(stalled),
                self.stall_seconds,
                names,
                "\n".join(line for e in self.served.engines for line in e.describe()),
                self._probe_loop(),
                thread_stacks(),
            )
        return len(stalled)

    def _probe_loop(self) -> str:
        """Whether the server's event loop runs a callback within a second."""
        loop = self._loop
        if loop is None:
            return "event loop: not known"
        if loop.is_closed():
            return "event loop: CLOSED"
        ran = threading.Event()
        start = time.monotonic()
        try:
            loop.call_soon_threadsafe(ran.set)
        except RuntimeError as exc:
            return f"event loop: cannot schedule ({exc})"
        if ran.wait(1.0):
            return f"event loop: answered a probe in {(time.monotonic() - start) * 1000:.1f} ms"
        return "event loop: NO answer to a probe within 1 s (blocked?)"


def thread_stacks() -> str:
    """Every thread's stack, as ``faulthandler`` prints them but with the threads' names."""
    names = {t.ident: t.name for t in threading.enumerate()}
    parts = []
    for ident, frame in sys._current_frames().items():
        stack = "".join(traceback.format_stack(frame))
        parts.append(f"Thread {names.get(ident, '?')} ({ident}):\n{stack}")
    return "\n".join(parts)
