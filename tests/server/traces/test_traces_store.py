"""The trace store on a real SQLite file: checkpoints in a thread of their own, pooled read connections."""

from __future__ import annotations

import sqlite3
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from toolkit.server.traces.service import TraceService
from toolkit.types.traces import CompletedCall


def calls(n: int) -> list[CompletedCall]:
    t0 = datetime(2025, 6, 1, tzinfo=UTC)
    return [
        CompletedCall(
            project_id="local/store",
            id=f"call-{i:06d}",
            trace_id=f"call-{i - i % 10:06d}",
            op_name="op",
            started_at=t0 + timedelta(milliseconds=i),
            ended_at=t0 + timedelta(milliseconds=i + 5),
            inputs={"text": "x" * 500},
        )
        for i in range(n)
    ]


def test_the_wal_is_checkpointed_by_a_thread_of_its_own_not_by_a_commit(tmp_path: Path) -> None:
    path = tmp_path / "traces.db"
    svc = TraceService(path)
    conn = svc.base.db.conn
    assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0, "a commit would checkpoint"
    before = path.stat().st_size
    for start in range(0, 2000, 500):
        svc.calls.complete("local", calls(2000)[start : start + 500])
    # the commits only appended to the WAL; the checkpoint thread copies it into the file
    deadline = time.monotonic() + 30
    while path.stat().st_size < before + 1_000_000:
        assert time.monotonic() < deadline, "the WAL was never copied into the database file"
        time.sleep(0.05)
    svc.close()
    # every connection is closed, the checkpoint thread's too: SQLite folded the WAL in and removed it
    assert not Path(f"{path}-wal").exists()
    with sqlite3.connect(path) as reopened:
        assert reopened.execute("SELECT count(*) FROM calls").fetchone()[0] == 2000


def test_streamed_reads_reuse_their_read_only_connections(tmp_path: Path) -> None:
    svc = TraceService(tmp_path / "traces.db")
    svc.calls.complete("local", calls(5))
    base = svc.base
    with base.reader() as first:
        pass
    with base.reader() as second, base.reader() as third:
        assert second is first and third is not first  # one in use: another is opened
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        first.execute("DELETE FROM calls")
    # a stream given up halfway hands its connection back, ready for the next read
    stream = base.rows("SELECT id FROM calls ORDER BY id", (), chunk=2)
    assert next(stream) == ["call-000000", "call-000001"]
    stream.close()
    with base.reader() as again:
        assert again in (first, third)
        assert again.execute("SELECT count(*) FROM calls").fetchone()[0] == 5
    svc.close()
    with pytest.raises(sqlite3.ProgrammingError):
        first.execute("SELECT 1")
