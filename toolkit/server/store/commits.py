"""A signal that wakes the requests waiting for something new in the database (long polls) when a
write transaction commits, from whichever thread wrote it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress


class CommitSignal:
    """Waiters are asyncio events of request handlers; any commit sets all of them (a waiter then
    reads again and waits again if what it waits for is not there yet). Closed at shutdown: every
    wait ends at once, so that no long poll holds the server open."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self.closed = False

    def notify(self) -> None:
        with self._lock:
            waiters = list(self._waiters)
        for loop, event in waiters:
            with suppress(RuntimeError):  # that loop has closed; its waiter is gone with it
                loop.call_soon_threadsafe(event.set)

    def close(self) -> None:
        self.closed = True
        self.notify()

    @contextmanager
    def watch(self) -> Iterator[asyncio.Event]:
        """An event set at the next commit, for the ``with`` block (enter it before reading, so
        that no commit between the read and the wait is missed)."""
        entry = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            self._waiters.add(entry)
        if self.closed:
            entry[1].set()
        try:
            yield entry[1]
        finally:
            with self._lock:
                self._waiters.discard(entry)
