"""The fast decoding of ``/call/upsert_batch`` bodies: the rows it gives are the rows pydantic's
validation gives, and whatever it does not recognise goes to pydantic (accepted or 422 as before)."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from support.traces_helpers import end, new_id, query, start
from toolkit.server.traces.call_rows import end_values, start_row
from toolkit.server.traces.routes.batch_body import fast_batch
from toolkit.types.traces import CallBatchStart, CallCreateBatchReq


def body(items: list[tuple[str, dict[str, Any]]]) -> bytes:
    return orjson.dumps({"batch": [{"mode": mode, "req": {mode: fields}} for mode, fields in items]})


def validated_rows(raw: bytes) -> list[Any]:
    rows: list[Any] = []
    for item in CallCreateBatchReq.model_validate_json(raw).batch:
        if isinstance(item, CallBatchStart):
            rows.append(start_row(1, item.req.start, "u"))
        else:
            rows.append(end_values(item.req.end))
    return rows


def fast_rows(raw: bytes) -> list[Any]:
    items = fast_batch(raw)
    assert items is not None
    return [start_row(1, f, "u") if mode == "start" else end_values(f) for mode, f in items]


P = "e/p"
TIMES = [
    "2025-06-01T12:00:00Z",
    "2025-06-01T12:00:00.5Z",
    "2025-06-01T12:00:00.123Z",
    "2025-06-01T12:00:00.123456+00:00",
    "2025-06-01T12:00:00.000001-05:30",
    "2025-06-01T12:00:00.250000",
    "2025-06-01T12:00:00",
]


@pytest.mark.parametrize("when", TIMES)
def test_fast_rows_equal_validated_rows(when: str) -> None:
    full = {
        **start(P, "a", "op", started_at=when, display_name="Nice", thread_id="t", turn_id="u"),
        "otel_dump": {"span": 1},
        "wb_run_id": "r",
        "wb_run_step": 3,
        "inputs": {"ref": "weave:///e/p/object/x:abc", "n": [1, 2.5, None, True]},
        "unknown": "ignored",
    }
    bare = {"project_id": P, "op_name": "op", "started_at": when}
    ended = end(P, "a", ended_at=when, output=[1, {"x": "y"}], exception="E", wb_run_step_end=4)
    plain_end = {"project_id": P, "id": "b", "ended_at": when, "started_at": None, "summary": {"weave": {}}}
    raw = body([("start", full), ("start", bare), ("end", ended), ("end", plain_end)])
    fast, slow = fast_rows(raw), validated_rows(raw)
    for row in (fast[1], slow[1]):  # the generated ids differ
        row[1] = row[2] = None
        row[13] = orjson.loads(row[13]) | {"id": None, "trace_id": None}
    assert fast == slow


UNUSUAL: list[tuple[str, Any]] = [
    ("started_at", 1748779200),  # pydantic reads a number as a time
    ("started_at", "2025-06-01 12:00:00Z"),
    ("started_at", "2025-06-01T12:00:00.1234567Z"),
    ("wb_run_step", 3.0),
    ("wb_run_step", True),
    ("attributes", None),
    ("op_name", None),
    ("parent_id", 7),
    ("started_at", "2025-13-01T12:00:00Z"),
    ("started_at", "0001-01-01T00:00:00+00:07"),  # no UTC form: pydantic's DateTime answers 422
    ("started_at", "9999-12-31T23:59:59-00:07"),
    ("wb_run_step", 2**63),  # beyond SQLite's integers: pydantic's Int64 answers 422
]


@pytest.mark.parametrize(("field", "value"), UNUSUAL)
def test_unusual_fields_go_to_pydantic(field: str, value: Any) -> None:
    assert fast_batch(body([("start", {**start(P, "a"), field: value})])) is None


MALFORMED = [
    b"{not json",
    b"[]",
    b"{}",  # the fuzz's 500 (a KeyError) until the fast path read "batch" with .get
    b'{"other": 1}',
    b'{"batch": {}}',
    b'{"batch": [1]}',
    b'{"batch": [{"req": {}}]}',
    b'{"batch": [{"mode": "x"}]}',
    b'{"batch": [{"mode": "start", "req": []}]}',
    b'{"batch": [{"mode": "end", "req": {"end": []}}]}',
]


@pytest.mark.parametrize("raw", MALFORMED)
def test_malformed_bodies_go_to_pydantic(raw: bytes) -> None:
    assert fast_batch(raw) is None


@pytest.mark.parametrize("raw", MALFORMED)
def test_over_http_malformed_bodies_answer_422_in_the_traces_shape(tr: httpx.Client, raw: bytes) -> None:
    r = tr.post("/call/upsert_batch", content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 422, r.text
    assert "reason" in r.json()


def test_over_http_coerced_values_are_kept_and_bad_ones_answer_422(tr: httpx.Client, project: str) -> None:
    cid = new_id()
    coerced = {**start(project, cid), "wb_run_step": 3.0}
    r = tr.post("/call/upsert_batch", content=body([("start", coerced), ("end", end(project, cid))]))
    assert r.status_code == 200, r.text
    (call,) = query(tr, project)
    assert call["wb_run_step"] == 3 and call["summary"]["weave"]["status"] == "success"
    bad = tr.post("/call/upsert_batch", content=body([("start", {**start(project, new_id()), "op_name": 7})]))
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["loc"] == ["batch", 0, "start", "req", "start", "op_name"]
    assert [c["id"] for c in query(tr, project)] == [cid]
