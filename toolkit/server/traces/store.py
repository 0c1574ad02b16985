"""The trace store's shared parts: the database (checkpointed in the background), user-scoped projects,
pooled read connections for streams."""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import BadRequest
from ..store.db import Database
from .common import now_us
from .schema import MIGRATIONS

log = logging.getLogger("toolkit.server.traces")
CHECKPOINT_EVERY_S = 0.5
WAL_KEPT_BYTES = 64 << 20
IDLE_READERS = 8


def check_project_id(project_id: str) -> str:
    """``entity/project`` with two non-empty parts."""
    entity, sep, project = project_id.partition("/")
    if not sep or not entity or not project or "/" in project:
        raise BadRequest(f"Invalid project_id: {project_id!r} (expected 'entity/project')")
    return project_id


class TraceDatabase(Database):
    """The shared SQLite access with 64 MiB of page cache per connection, so that the indexes of
    large projects stay in memory while calls are written.

    A commit appends to the WAL and returns (durable against a killed process: the frames are with
    the operating system before the answer is sent). Copying the WAL back into the database file (a
    checkpoint, with its fsync) is left to a thread of its own, at most every ``CHECKPOINT_EVERY_S``
    after a write, instead of to whichever request crossed SQLite's threshold: no ingest waits on it.

    Pages of 16 KiB: a call's row (its JSON fragments and finished line, about 2 KB) and its index
    entries fill fewer pages, which cuts the CPU of writing them (17% of SQLite's part of ingest) and
    of scanning them.
    """

    page_size = 16384

    def __init__(self, path: Path, migrations: Sequence[str]) -> None:
        self._written = threading.Event()
        self._closing = threading.Event()
        super().__init__(path, migrations)
        self._checkpointer = threading.Thread(target=self._checkpoints, name="traces-checkpoint", daemon=True)
        self._checkpointer.start()

    def _open(self) -> sqlite3.Connection:
        conn = super()._open()
        conn.execute("PRAGMA cache_size = -65536")
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        conn.execute(f"PRAGMA journal_size_limit = {WAL_KEPT_BYTES}")
        return conn

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        with super().write() as conn:
            yield conn
        self._written.set()

    def _checkpoints(self) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30.0)
        try:
            while self._written.wait() and not self._closing.is_set():
                self._written.clear()
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
                except sqlite3.Error:
                    log.exception("checkpoint of %s failed", self.path)
                self._closing.wait(CHECKPOINT_EVERY_S)
        finally:
            conn.close()

    def close(self) -> None:
        """Stop the checkpoints, then close; SQLite checkpoints the WAL as the last connection closes."""
        self._closing.set()
        self._written.set()
        self._checkpointer.join()
        super().close()


class Base:
    """``traces.db`` and the map from (user, ``entity/project``) to the project's row id."""

    def __init__(self, path: Path) -> None:
        self.db = TraceDatabase(path, MIGRATIONS)
        self._pids: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        self._idle: list[sqlite3.Connection] = []
        self._closed = False

    def pid(self, user_id: str, project_id: str, *, create: bool = False) -> int | None:
        """The project's id for this user; ``None`` when it does not exist and ``create`` is false."""
        key = (user_id, project_id)
        pid = self._pids.get(key)
        if pid is not None:
            return pid
        check_project_id(project_id)
        row = self.db.conn.execute(
            "SELECT pid FROM projects WHERE user_id = ? AND name = ?", (user_id, project_id)
        ).fetchone()
        if row is None:
            if not create:
                return None
            with self.db.write() as conn:
                conn.execute(
                    "INSERT OR IGNORE INTO projects (user_id, name, created_at) VALUES (?, ?, ?)",
                    (user_id, project_id, now_us()),
                )
                row = conn.execute(
                    "SELECT pid FROM projects WHERE user_id = ? AND name = ?", (user_id, project_id)
                ).fetchone()
        with self._lock:
            self._pids[key] = int(row[0])
        return int(row[0])

    @contextmanager
    def reader(self) -> Iterator[sqlite3.Connection]:
        """A read-only connection of its own for one streamed read (a stream may hop between threads),
        reused by later reads (opening one costs more than a small query)."""
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = sqlite3.connect(self.db.path, isolation_level=None, check_same_thread=False, timeout=30.0)
            conn.execute("PRAGMA query_only = ON")
        try:
            yield conn
        finally:
            with self._lock:
                keep = not self._closed and len(self._idle) < IDLE_READERS
                if keep:
                    self._idle.append(conn)
            if not keep:
                conn.close()

    def rows(self, sql: str, params: Sequence[Any], chunk: int = 2000) -> Iterator[list[Any]]:
        """The first column of each result row, ``chunk`` rows at a time, never all in memory (one
        statement: one consistent snapshot)."""
        with self.reader() as conn:
            cursor = conn.execute(sql, params)
            try:
                while batch := cursor.fetchmany(chunk):
                    yield [row[0] for row in batch]
            finally:
                cursor.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
        self.db.close()
