"""Migration 2 of ``traces.db``: the time index carries the latency, so a ``$expr`` latency filter on
the newest calls is decided from the index; a call written whole keeps its finished line, which reads
return as they would assemble it; a database made before it keeps its calls."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from support.traces_helpers import end, start
from toolkit.server.traces.call_rows import COLUMNS, end_values, merge_end, start_row
from toolkit.server.traces.routes.batch_body import fast_batch
from toolkit.server.traces.schema import MIGRATIONS
from toolkit.server.traces.service import TraceService
from toolkit.server.traces.store import TraceDatabase
from toolkit.types.traces import CallsQueryReq

P = "e/p"
T0 = datetime(2025, 6, 1, 12, tzinfo=UTC)
SLOW = {"$expr": {"$gt": [{"$getField": "summary.weave.latency_ms"}, {"$literal": 1500.5}]}}


def batch(latencies: list[int]) -> list[tuple[str, Any]]:
    items = []
    for i, ms in enumerate(latencies):
        cid = f"call-{i:03d}"
        at = T0 + timedelta(seconds=i)
        done = (at + timedelta(milliseconds=ms)).isoformat()
        items += [("start", start(P, cid, started_at=at.isoformat())), ("end", end(P, cid, ended_at=done))]
    parsed = fast_batch(orjson.dumps({"batch": [{"mode": m, "req": {m: f}} for m, f in items]}))
    assert parsed is not None
    return parsed


def slow_ids(service: TraceService) -> list[str]:
    req = CallsQueryReq.model_validate(
        {
            "project_id": P,
            "query": SLOW,
            "sort_by": [{"field": "started_at", "direction": "desc"}],
            "limit": 3,
        }
    )
    return [
        orjson.loads(line)["id"] for chunk in service.stream_calls("u", req) for line in chunk.splitlines()
    ]


def test_database_of_migration_1_gains_the_latency_in_its_time_index(tmp_path: Path) -> None:
    path = tmp_path / "traces.db"
    old = TraceDatabase(path, MIGRATIONS[:1])
    items = batch([100, 2000, 300, 1600, 1501, 5000, 10])
    rows = [start_row(1, f, "u") for mode, f in items if mode == "start"]
    for row, (_, f) in zip(rows, [i for i in items if i[0] == "end"], strict=True):
        merge_end(row, end_values(f), P)
    with old.write() as conn:
        conn.execute("INSERT INTO projects VALUES (1, 'u', ?, 0)", (P,))
        v1_columns = COLUMNS.removesuffix(", line")
        marks = ", ".join("?" * 23)
        conn.executemany(f"INSERT INTO calls ({v1_columns}) VALUES ({marks})", [r[:23] for r in rows])
    old.close()
    service = TraceService(path)
    try:
        conn = service.base.db.conn
        assert conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS) == 2
        columns = [row[2] for row in conn.execute("PRAGMA index_info(calls_by_time)")]
        assert columns == ["pid", "started_at", "id", "latency_ms"]
        assert slow_ids(service) == ["call-005", "call-004", "call-003"]
        plan = " ".join(
            row[3]
            for row in conn.execute(
                "EXPLAIN QUERY PLAN SELECT id FROM calls c WHERE "
                "c.pid = 1 AND c.latency_ms > 1 ORDER BY c.started_at DESC"
            )
        )
        assert "calls_by_time" in plan
    finally:
        service.close()


def all_calls(service: TraceService) -> list[Any]:
    req = CallsQueryReq(project_id=P)
    return [orjson.loads(line) for chunk in service.stream_calls("u", req) for line in chunk.splitlines()]


def test_stored_lines_read_as_the_assembled_ones_and_changes_clear_them(tmp_path: Path) -> None:
    service = TraceService(tmp_path / "traces.db")
    try:
        named = {**start(P, "named", display_name='Nïce "one"', inputs={"q": "é\n"}), "wb_run_step": 2}
        items = [
            ("start", named),
            ("end", end(P, "named", output={"a": [1, None]}, summary={"usage": {"m": {"requests": 1}}})),
            ("start", start(P, "failed", "weave:///e/p/op/answer:abc")),
            ("end", end(P, "failed", exception="ValueError", summary={"weave": {"x": 1}})),
            ("start", start(P, "running")),
        ]
        body = orjson.dumps({"batch": [{"mode": m, "req": {m: f}} for m, f in items]})
        parsed = fast_batch(body)
        assert parsed is not None
        service.calls.upsert_batch("u", parsed)
        service.calls.upsert_batch("u", batch([1600]))
        conn = service.base.db.conn
        stored = dict(conn.execute("SELECT id, line FROM calls"))
        assert stored["running"] is None and stored["named"] and stored["failed"] and stored["call-000"]
        read = all_calls(service)
        with service.base.db.write() as w:
            w.execute("UPDATE calls SET line = NULL")
        assert read == all_calls(service)
        by_id = {c["id"]: c for c in read}
        assert len(by_id) == 4 and by_id["call-000"]["summary"]["weave"]["latency_ms"] == 1600
        assert by_id["named"]["summary"]["weave"] == {
            "status": "success",
            "latency_ms": 1000,
            "display_name": 'Nïce "one"',
        }
        service.calls.update("u", P, "failed", "renamed")
        assert conn.execute("SELECT line FROM calls WHERE id = 'failed'").fetchone()[0] is None
        assert {c["id"]: c for c in all_calls(service)}["failed"]["display_name"] == "renamed"
    finally:
        service.close()


def test_a_new_database_has_16_kib_pages_and_one_of_4_kib_keeps_its_pages_and_calls(tmp_path: Path) -> None:
    new = TraceService(tmp_path / "new.db")
    try:
        assert new.base.db.conn.execute("PRAGMA page_size").fetchone()[0] == 16384
    finally:
        new.close()
    path = tmp_path / "traces.db"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(TraceDatabase, "page_size", None)
        old = TraceService(path)
        old.calls.upsert_batch("u", batch([100, 2000]))
        old.close()
    service = TraceService(path)
    try:
        conn = service.base.db.conn
        assert conn.execute("PRAGMA page_size").fetchone()[0] == 4096
        service.calls.upsert_batch("u", batch([100, 2000, 300])[4:])
        assert [c["id"] for c in all_calls(service)] == ["call-000", "call-001", "call-002"]
        assert service.base.db.integrity_ok()
    finally:
        service.close()
