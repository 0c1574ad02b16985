"""The trace store's shared parts: the database, user-scoped projects, streaming read connections."""

from __future__ import annotations

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


def check_project_id(project_id: str) -> str:
    """``entity/project`` with two non-empty parts."""
    entity, sep, project = project_id.partition("/")
    if not sep or not entity or not project or "/" in project:
        raise BadRequest(f"Invalid project_id: {project_id!r} (expected 'entity/project')")
    return project_id


class TraceDatabase(Database):
    """The shared SQLite access with 64 MiB of page cache per connection, so that the indexes of
    large projects stay in memory while calls are written."""

    def _open(self) -> sqlite3.Connection:
        conn = super()._open()
        conn.execute("PRAGMA cache_size = -65536")
        return conn


class Base:
    """``traces.db`` and the map from (user, ``entity/project``) to the project's row id."""

    def __init__(self, path: Path) -> None:
        self.db = TraceDatabase(path, MIGRATIONS)
        self._pids: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

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
        """A connection of its own for one streamed read (a stream may hop between threads)."""
        conn = sqlite3.connect(self.db.path, isolation_level=None, check_same_thread=False, timeout=30.0)
        conn.row_factory = sqlite3.Row
        try:
            conn.execute("PRAGMA query_only = ON")
            conn.execute("BEGIN")
            yield conn
        finally:
            conn.close()

    def rows(self, sql: str, params: Sequence[Any], chunk: int = 500) -> Iterator[list[Any]]:
        """The first column of each result row, ``chunk`` rows at a time, never all in memory."""
        with self.reader() as conn:
            cursor = conn.execute(sql, params)
            while batch := cursor.fetchmany(chunk):
                yield [row[0] for row in batch]

    def close(self) -> None:
        self.db.close()
