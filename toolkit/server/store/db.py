"""SQLite access: WAL mode, one connection per thread for reads, one serialised writer."""

from __future__ import annotations

import sqlite3
import threading
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

from .commits import CommitSignal

Migration = str


class _Connection(sqlite3.Connection):
    """A connection the database can track weakly (a thread's connection goes when the thread does)."""


class Database:
    """A SQLite file shared by the request threads of the server.

    Reads use a per-thread connection; writes go through :meth:`write`, which holds a process-wide
    lock and one ``BEGIN IMMEDIATE`` transaction, so a request's writes land together or not at all.
    :meth:`close` closes the connection of every thread. ``commits`` wakes long polls after each
    write transaction.
    """

    # the page size of a new file (SQLite's default, 4096, when None); an existing file keeps its own
    page_size: int | None = None

    def __init__(self, path: Path, migrations: Sequence[Migration]) -> None:
        self.path = path
        self._local = threading.local()
        self._write_lock = threading.RLock()
        self._connections: weakref.WeakSet[sqlite3.Connection] = weakref.WeakSet()
        self._connections_lock = threading.Lock()
        self._closed = False
        self.commits = CommitSignal()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._migrate(migrations)

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=30.0, factory=_Connection
        )
        conn.row_factory = sqlite3.Row
        if self.page_size:  # before WAL mode, which fixes it
            conn.execute(f"PRAGMA page_size={self.page_size}")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA busy_timeout=30000")
        return conn

    @property
    def conn(self) -> sqlite3.Connection:
        """This thread's connection (reads, and writes inside :meth:`write`)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            with self._connections_lock:
                if self._closed:
                    raise sqlite3.ProgrammingError(f"the database {self.path} is closed")
                conn = self._open()
                self._connections.add(conn)
            self._local.conn = conn
        return conn

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One atomic write transaction; nested calls join the outer one."""
        with self._write_lock:
            conn = self.conn
            if conn.in_transaction:
                yield conn
                return
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            try:
                conn.execute("COMMIT")
            except sqlite3.Error:
                self._discard(conn)
                raise
        self.commits.notify()

    def _discard(self, conn: sqlite3.Connection) -> None:
        """Roll back and close this thread's connection after its ``COMMIT`` failed (e.g. "SQL
        statements in progress": a statement of it not run to its end). Left open, the transaction
        would keep the file's write lock and every later write would fail ("database is locked"); the
        statement would keep a stale snapshot that no later write of this thread could start from. The
        thread's next access opens a new connection."""
        with suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        self._local.conn = None
        conn.close()

    def _migrate(self, migrations: Sequence[Migration]) -> None:
        with self.write() as conn:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            for number, script in enumerate(migrations[version:], start=version + 1):
                for statement in _statements(script):
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {number}")

    def integrity_ok(self) -> bool:
        return bool(self.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok")

    def close(self) -> None:
        """Close every thread's connection; the database cannot be used afterwards."""
        self.commits.close()
        with self._connections_lock:
            self._closed = True
            connections = list(self._connections)
        for conn in connections:
            conn.close()


def _statements(script: str) -> list[str]:
    """Split a migration script into statements (executescript would commit our transaction)."""
    out: list[str] = []
    buf = ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            if buf.strip():
                out.append(buf.strip())
            buf = ""
    if buf.strip():
        out.append(buf.strip())
    return out
