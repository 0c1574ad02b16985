"""Regression tests of the server errors the deep fuzz (bench/fuzz.py) and its follow-up found,
each a 500 before its fix (docs/reliability.md, "Found and fixed")."""

from __future__ import annotations

import uuid

import httpx
import pytest

from support.reliability_support import error_shape_problem

BIG = 2**70  # beyond SQLite's 64-bit integers: an OverflowError when bound
QUERIES = [
    "/traces/calls/stream_query",
    "/traces/threads/stream_query",
    "/traces/cost/query",
    "/traces/objs/query",
    "/traces/feedback/query",
    "/traces/table/query",
    "/traces/table/query_stream",
]


def _project() -> str:
    return f"local/f{uuid.uuid4().hex[:10]}"


def _call(project: str, **fields: object) -> dict[str, object]:
    return {"project_id": project, "op_name": "op", "started_at": "2025-06-01T12:00:00Z", **fields}


@pytest.mark.parametrize("value", [BIG, -BIG])
@pytest.mark.parametrize("name", ["limit", "offset"])
@pytest.mark.parametrize("path", QUERIES)
def test_a_page_bound_beyond_64_bits_is_a_4xx(http: httpx.Client, path: str, name: str, value: int) -> None:
    project = _project()
    assert http.post("/traces/call/start", json={"start": _call(project)}).status_code == 200
    table = http.post("/traces/table/create", json={"table": {"project_id": project, "rows": [{"a": 1}]}})
    assert table.status_code == 200, table.text
    r = http.post(path, json={"project_id": project, "digest": table.json()["digest"], name: value})
    assert 400 <= r.status_code < 500, r.text
    assert error_shape_problem(path, r.status_code, r.json()) is None


@pytest.mark.parametrize("field", ["wb_run_step", "wb_run_step_end"])
def test_a_run_step_beyond_64_bits_is_a_4xx_that_writes_nothing(http: httpx.Client, field: str) -> None:
    project = _project()
    call = {**_call(project, id="c1", trace_id="t1", ended_at="2025-06-01T12:00:01Z"), field: BIG}
    r = http.post(f"/traces/v2/{project}/calls/complete", json={"batch": [call]})
    assert 400 <= r.status_code < 500, r.text
    assert error_shape_problem("/traces/", r.status_code, r.json()) is None
    assert http.post("/traces/calls/stream_query", json={"project_id": project}).text == ""


@pytest.mark.parametrize("literal", [BIG, -BIG])
def test_a_huge_integer_literal_compares_as_a_number(http: httpx.Client, literal: int) -> None:
    """A ``$literal`` integer beyond 64 bits compared with a JSON value: SQLite cannot bind it, so it
    is compared as a real (it was a 500)."""
    project = _project()
    for n, value in enumerate([5, 2**62]):
        call = _call(project, id=f"c{n}", inputs={"a": value})
        assert http.post("/traces/call/start", json={"start": call}).status_code == 200
    expr = {"$gt": [{"$getField": "inputs.a"}, {"$literal": literal}]}
    r = http.post("/traces/calls/stream_query", json={"project_id": project, "query": {"$expr": expr}})
    assert r.status_code == 200, r.text
    assert len(r.text.splitlines()) == (0 if literal > 0 else 2)


DATES = ["1969-12-31T23:59:59.500000Z", "0828-12-01T01:10:19.676253Z", "2025-06-01T12:00:00.000001Z"]


@pytest.mark.parametrize("effective_date", DATES)
def test_a_price_before_1970_reads_back_its_own_date(http: httpx.Client, effective_date: str) -> None:
    """The SQL rendering of a stored time took the fraction of a negative microsecond count with its
    sign (``0828-12-01T01:10:20.-323747Z``, which failed the response schema)."""
    project = _project()
    price = {"prompt_token_cost": 1.0, "completion_token_cost": 2.0, "effective_date": effective_date}
    made = http.post("/traces/cost/create", json={"project_id": project, "costs": {"m": price}})
    assert made.status_code == 200, made.text
    r = http.post("/traces/cost/query", json={"project_id": project})
    assert r.status_code == 200, r.text
    assert [c["effective_date"] for c in r.json()["results"]] == [effective_date]


def test_a_cost_query_of_unknown_fields_only_answers_empty_objects(http: httpx.Client) -> None:
    """``fields`` naming no price column selected nothing (a SQL syntax error, a 500)."""
    project = _project()
    price = {"prompt_token_cost": 1.0, "completion_token_cost": 2.0}
    made = http.post("/traces/cost/create", json={"project_id": project, "costs": {"m": price}})
    assert made.status_code == 200, made.text
    r = http.post("/traces/cost/query", json={"project_id": project, "fields": ["\u00b7aa", "nope\u0000"]})
    assert r.status_code == 200, r.text
    assert r.json() == {"results": [{}]}
    some = http.post("/traces/cost/query", json={"project_id": project, "fields": ["llm_id", "nope"]})
    assert some.json() == {"results": [{"llm_id": "m"}]}
