"""Every date-time field of every request, at the edges of datetime's range, over HTTP.

A time of year 1 with a positive offset (or of year 9999 with a negative one) parses, but has no
UTC form, which every store of times needs: it was a 500 (the fuzzer's ``"ended_at":
"0001-01-01T00:00:00+00:07"`` on ``/traces/call/end``). Now it is a 4xx in the owning service's
shape that writes nothing (the shared ``DateTime`` of ``toolkit/types/common.py``), and the last
representable times on either side are accepted and read back. The fields are those of the app's
own OpenAPI: a new date-time field fails ``test_every_date_time_field_is_covered`` until it is
added here.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from support.reliability_openapi import date_time_fields, fuzz_document
from support.reliability_support import create_model, error_shape_problem

OUT_OF_RANGE = [
    "0001-01-01T00:00:00+00:07",
    "0001-01-01T23:58:59.999999+23:59",
    "9999-12-31T23:59:59-00:07",
    "9999-12-31T00:01:00-23:59",
]
IN_RANGE = ["0001-01-01T00:00:00-00:07", "0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z"]
T = "2025-06-01T12:00:00Z"


@dataclass
class Ctx:
    model_id: str
    entity: str
    project: str

    @property
    def project_id(self) -> str:
        return f"{self.entity}/{self.project}"


def _trajectory() -> dict[str, Any]:
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ho"}]
    return {"messages_and_choices": messages, "reward": 1.0, "start_time": T}


def _start(c: Ctx) -> dict[str, Any]:
    return {"project_id": c.project_id, "id": "c1", "trace_id": "t1", "op_name": "op", "started_at": T}


def _end(c: Ctx) -> dict[str, Any]:
    return {"project_id": c.project_id, "id": "c1", "ended_at": T, "started_at": T}


def _complete(c: Ctx) -> dict[str, Any]:
    return {**_start(c), **_end(c)}


def _batch(c: Ctx) -> dict[str, Any]:
    items = [{"mode": "start", "req": {"start": _start(c)}}, {"mode": "end", "req": {"end": _end(c)}}]
    return {"batch": items}


V2 = "/traces/v2/{entity}/{project}"
# operation -> its smallest valid body, holding every date-time field of the operation once
BODIES: dict[str, Callable[[Ctx], dict[str, Any]]] = {
    "POST /v1/preview/models/{model_id}/log": lambda c: {
        "split": "val",
        "trajectory_groups": [{"trajectories": [_trajectory(), _trajectory()]}],
    },
    "POST /v1/preview/training-jobs": lambda c: {
        "model_id": c.model_id,
        "trajectory_groups": [{"trajectories": [_trajectory(), _trajectory()]}],
    },
    "POST /traces/call/start": lambda c: {"start": _start(c)},
    "POST /traces/call/end": lambda c: {"end": _end(c)},
    "POST /traces/call/upsert_batch": _batch,
    f"POST {V2}/calls/complete": lambda c: {"batch": [_complete(c)]},
    f"POST {V2}/call/start": lambda c: {"start": _start(c)},
    f"POST {V2}/call/end": lambda c: {"end": _end(c)},
    "POST /traces/cost/create": lambda c: {
        "project_id": c.project_id,
        "costs": {"m": {"prompt_token_cost": 1.0, "completion_token_cost": 2.0, "effective_date": T}},
    },
    "POST /traces/threads/stream_query": lambda c: {
        "project_id": c.project_id,
        "filter": {"after_datetime": T, "before_datetime": T},
    },
}
# what a written body leaves behind (empty after a refused one); a read writes nothing
CALLS = ("/traces/calls/stream_query", "/traces/call/")
STORED: dict[str, Callable[[httpx.Client, Ctx], Any]] = {
    "/log": lambda h, c: h.get(f"/v1/preview/models/{c.model_id}/trajectories").json(),
    "/training-jobs": lambda h, c: [
        j for j in h.get("/v1/preview/training-jobs").json() if j["model_id"] == c.model_id
    ],
    "/cost/create": lambda h, c: h.post("/traces/cost/query", json={"project_id": c.project_id}).json()[
        "results"
    ],
    "/threads/": lambda h, c: [],
    "/traces/": lambda h, c: h.post(CALLS[0], json={"project_id": c.project_id}).text.splitlines(),
}
FIELDS = sorted(date_time_fields(fuzz_document()))


def put(body: Any, field: str, value: str) -> int:
    """Set ``field`` (``a.b[].c{}.d``: every item of an array, every value of a map, where the path
    exists) to ``value``; how many times it was set."""
    head, _, rest = field.partition(".")
    name = head.rstrip("[]{}")
    if not rest and head == name:
        body[name] = value
        return 1
    nodes = [body[name]] if name in body else []
    for mark in (head[i : i + 2] for i in range(len(name), len(head), 2)):
        nodes = [x for n in nodes for x in (n if mark == "[]" else n.values())]
    return sum(put(node, rest, value) for node in nodes)


def post(http: httpx.Client, field: str, value: str, ctx: Ctx) -> tuple[str, httpx.Response]:
    operation, name = field.rsplit(" ", 1)
    body = BODIES[operation](ctx)
    assert put(body, name, value) >= 1
    path = operation.split(" ", 1)[1].format(**vars(ctx))
    return path, http.post(path, json=body)


def stored(http: httpx.Client, path: str, ctx: Ctx) -> Any:
    return next(read(http, ctx) for key, read in STORED.items() if key in path)


@pytest.fixture
def ctx(http: httpx.Client) -> Ctx:
    model = create_model(http)
    return Ctx(model["id"], model["entity"], f"dt{uuid.uuid4().hex[:10]}")


def test_every_date_time_field_is_covered() -> None:
    assert {f.rsplit(" ", 1)[0] for f in FIELDS} == set(BODIES)
    assert len(FIELDS) >= 16  # log and RL job start_time, the trace ingest times, costs, threads


@pytest.mark.parametrize("value", OUT_OF_RANGE)
@pytest.mark.parametrize("field", FIELDS)
def test_a_time_without_a_utc_form_is_a_4xx_that_writes_nothing(
    http: httpx.Client, ctx: Ctx, field: str, value: str
) -> None:
    path, r = post(http, field, value, ctx)
    assert 400 <= r.status_code < 500, r.text
    assert error_shape_problem(path, r.status_code, r.json()) is None
    assert "out of range in UTC" in r.text
    assert stored(http, path, ctx) == []


@pytest.mark.parametrize("value", IN_RANGE)
@pytest.mark.parametrize("field", [f for f in FIELDS if "/training-jobs" not in f])  # no training
def test_the_last_times_of_the_range_are_accepted(
    http: httpx.Client, ctx: Ctx, field: str, value: str
) -> None:
    path, r = post(http, field, value, ctx)
    assert r.status_code == 200, r.text
    if "/call/end" in path:  # an end alone is kept until its start comes
        r = http.post(path.replace("/end", "/start"), json={"start": _start(ctx)})
        assert r.status_code == 200, r.text
    assert stored(http, path, ctx) != [] or "/threads/" in path


TIME_QUERIES = [
    ("/traces/calls/stream_query", "started_at"),
    ("/traces/calls/query_stats", "ended_at"),
    ("/traces/feedback/query", "created_at"),
    ("/traces/cost/query", "effective_date"),
]


@pytest.mark.parametrize("literal", [*OUT_OF_RANGE, 1e308, -(2**70), "not a time"])
@pytest.mark.parametrize(("path", "column"), TIME_QUERIES)
def test_a_query_literal_beyond_the_range_is_400(
    http: httpx.Client, ctx: Ctx, path: str, column: str, literal: object
) -> None:
    """The server's own parsing of date-times: ``$literal`` times compared with a time column
    (a number: seconds since the epoch; 1e308 was a 500 of ``int(inf)``)."""
    ok = http.post("/traces/call/start", json={"start": _start(ctx)})
    assert ok.status_code == 200, ok.text
    expr = {"$gt": [{"$getField": column}, {"$literal": literal}]}
    r = http.post(path, json={"project_id": ctx.project_id, "query": {"$expr": expr}})
    assert r.status_code == 400, r.text
    assert r.json() == {"reason": f"Invalid datetime literal: {literal}"}


@pytest.mark.parametrize("literal", IN_RANGE)
def test_a_query_literal_at_the_edges_of_the_range_answers(
    http: httpx.Client, ctx: Ctx, literal: str
) -> None:
    ok = http.post("/traces/call/start", json={"start": _start(ctx)})
    assert ok.status_code == 200, ok.text
    expr = {"$gt": [{"$getField": "started_at"}, {"$literal": literal}]}
    r = http.post(CALLS[0], json={"project_id": ctx.project_id, "query": {"$expr": expr}})
    assert r.status_code == 200, r.text
    assert len(r.text.splitlines()) == (1 if literal.startswith("0001") else 0)
