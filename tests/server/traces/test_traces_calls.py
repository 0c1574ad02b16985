"""Calls over loopback HTTP: ingest paths, reads, derived summary fields, queries, deletes, costs."""

from __future__ import annotations

from datetime import datetime

import httpx
import pytest

from support.traces_helpers import end, ids, jsonl, new_id, new_project, query, start


def upsert(tr: httpx.Client, items: list[tuple[str, dict]]) -> httpx.Response:
    batch = [{"mode": mode, "req": {mode: body}} for mode, body in items]
    r = tr.post("/call/upsert_batch", json={"batch": batch})
    assert r.status_code == 200, r.text
    return r


def test_start_end_read_round_trip_with_derived_summary(tr: httpx.Client, project: str) -> None:
    cid = new_id()
    op = f"weave:///{project}/op/answer:2El9nYJ3CnBykmEJWqmPfvUVTXr0mfgDe2yiUClnhaY"
    r = tr.post(
        "/call/start",
        json={
            "start": start(
                project,
                cid,
                op,
                started_at="2025-06-01T12:00:00.123456+00:00",
                attributes={"weave": {"source": "python-sdk"}},
                inputs={"question": "2+2?"},
                wb_user_id=None,
            )
        },
    )
    assert r.status_code == 200 and r.json() == {"id": cid, "trace_id": cid}
    running = tr.post("/call/read", json={"project_id": project, "id": cid}).json()["call"]
    assert running["summary"]["weave"] == {"status": "running", "trace_name": "answer"}
    assert running["ended_at"] is None
    summary = {
        "usage": {"m": {"requests": 1, "prompt_tokens": 12}},
        "status_counts": {"success": 1, "error": 0},
    }
    r = tr.post(
        "/call/end",
        json={
            "end": end(project, cid, ended_at="2025-06-01T12:00:01.456789+00:00", output="4", summary=summary)
        },
    )
    assert r.status_code == 200 and r.json() == {}
    call = tr.post("/call/read", json={"project_id": project, "id": cid}).json()["call"]
    assert call["started_at"] == "2025-06-01T12:00:00.123456Z"
    assert call["ended_at"] == "2025-06-01T12:00:01.456789Z"
    assert call["inputs"] == {"question": "2+2?"} and call["output"] == "4"
    assert call["attributes"] == {"weave": {"source": "python-sdk"}}
    assert call["summary"]["usage"] == summary["usage"]
    assert call["summary"]["weave"] == {"status": "success", "latency_ms": 1333, "trace_name": "answer"}
    assert call["project_id"] == project and call["op_name"] == op and call["wb_user_id"]
    assert tr.post("/call/read", json={"project_id": project, "id": new_id()}).json() == {"call": None}


def test_status_error_and_descendant_error_and_display_name(tr: httpx.Client, project: str) -> None:
    failed, parent = new_id(), new_id()
    upsert(
        tr,
        [
            ("start", start(project, failed, "boom")),
            ("end", end(project, failed, exception='{"type":"ValueError"}')),
            ("start", start(project, parent, "outer", display_name="Nice")),
            ("end", end(project, parent, summary={"status_counts": {"success": 1, "error": 1}})),
        ],
    )
    calls = {c["id"]: c for c in query(tr, project)}
    assert calls[failed]["summary"]["weave"]["status"] == "error"
    assert calls[parent]["summary"]["weave"]["status"] == "descendant_error"
    assert calls[parent]["summary"]["weave"]["display_name"] == "Nice"
    assert "trace_name" not in calls[parent]["summary"]["weave"]


def test_upsert_batch_answers_in_order_and_generates_missing_ids(tr: httpx.Client, project: str) -> None:
    cid = new_id()
    no_ids = start(project, "x")
    del no_ids["id"], no_ids["trace_id"]
    r = upsert(tr, [("start", start(project, cid)), ("end", end(project, cid)), ("start", no_ids)])
    res = r.json()["res"]
    assert res[0] == {"id": cid, "trace_id": cid} and res[1] == {}
    assert res[2]["id"] and res[2]["trace_id"] and res[2]["id"] != cid
    assert sorted(ids(query(tr, project))) == sorted([cid, res[2]["id"]])


def test_end_in_a_later_batch_updates_the_call(tr: httpx.Client, project: str) -> None:
    cid = new_id()
    upsert(tr, [("start", start(project, cid))])
    upsert(tr, [("end", end(project, cid, output={"x": 1}))])
    (call,) = query(tr, project)
    assert call["output"] == {"x": 1} and call["summary"]["weave"]["status"] == "success"


def test_v2_calls_complete_and_single_call_paths(tr: httpx.Client, project: str) -> None:
    a, b = new_id(), new_id()
    complete = {**start(project, a), **end(project, a, output=1)}
    r = tr.post(f"/v2/{project}/calls/complete", json={"batch": [complete]})
    assert r.status_code == 200 and r.json() == {}
    assert tr.post(f"/v2/{project}/call/start", json={"start": start(project, b)}).json()["id"] == b
    assert tr.post(f"/v2/{project}/call/end", json={"end": end(project, b, output=2)}).json() == {}
    calls = {c["id"]: c["output"] for c in query(tr, project)}
    assert calls == {a: 1, b: 2}
    wrong = tr.post("/v2/other/project/calls/complete", json={"batch": [complete]})
    assert wrong.status_code == 400 and "reason" in wrong.json()


def test_body_without_content_type_is_json(tr: httpx.Client, project: str) -> None:
    import json

    cid = new_id()
    sent = start(project, cid, op="no-content-type", inputs={"x": [1, "two"]})
    r = tr.post("/call/start", content=json.dumps({"start": sent}).encode())
    assert r.status_code == 200 and "content-type" not in r.request.headers
    call = tr.post("/call/read", json={"project_id": project, "id": cid}).json()["call"]
    assert (call["op_name"], call["inputs"]) == (sent["op_name"], sent["inputs"])
    assert datetime.fromisoformat(call["started_at"]) == datetime.fromisoformat(sent["started_at"])


def test_bad_input_answers_in_weave_shape(tr: httpx.Client, project: str) -> None:
    missing = tr.post("/call/start", json={"start": {"project_id": project}})
    assert missing.status_code == 422 and "reason" in missing.json()
    assert tr.post("/call/start", content=b"{not json").status_code == 422
    bad_mode = tr.post("/call/upsert_batch", json={"batch": [{"mode": "middle", "req": {}}]})
    assert bad_mode.status_code == 422
    long_op = tr.post("/call/start", json={"start": start(project, new_id(), "x" * 129)})
    assert long_op.status_code == 400 and "op_name" in long_op.json()["reason"]
    bad_project = tr.post("/call/start", json={"start": start("no-slash", new_id())})
    assert bad_project.status_code == 400
    bad_query = tr.post(
        "/calls/stream_query", json={"project_id": project, "query": {"$expr": {"$nope": []}}}
    )
    assert bad_query.status_code == 400 and bad_query.json()["reason"].startswith("Unknown operator")
    bad_field = tr.post(
        "/calls/stream_query",
        json={"project_id": project, "query": {"$expr": {"$eq": [{"$getField": "nope"}, {"$literal": 1}]}}},
    )
    assert bad_field.status_code == 400
    empty_and = tr.post("/calls/stream_query", json={"project_id": project, "query": {"$expr": {"$and": []}}})
    assert empty_and.status_code == 400
    bad_sort = tr.post(
        "/calls/stream_query", json={"project_id": project, "sort_by": [{"field": "id", "direction": "up"}]}
    )
    assert bad_sort.status_code == 422
    assert tr.post("/calls/query_stats", json={"project_id": project, "limit": 0}).status_code == 400
    assert tr.post("/call/update", json={"project_id": project, "call_id": new_id()}).status_code == 400


def test_update_display_name(tr: httpx.Client, project: str) -> None:
    cid = new_id()
    upsert(tr, [("start", start(project, cid))])
    r = tr.post("/call/update", json={"project_id": project, "call_id": cid, "display_name": "renamed"})
    assert r.status_code == 200 and r.json() == {}
    assert (
        tr.post("/call/read", json={"project_id": project, "id": cid}).json()["call"]["display_name"]
        == "renamed"
    )
    missing = tr.post("/call/update", json={"project_id": project, "call_id": new_id(), "display_name": "x"})
    assert missing.status_code == 404 and "reason" in missing.json()


def test_delete_removes_descendants_from_every_query(tr: httpx.Client, project: str) -> None:
    root, child, grandchild, other = new_id(), new_id(), new_id(), new_id()
    upsert(
        tr,
        [
            ("start", start(project, root)),
            ("start", start(project, child, parent_id=root, trace_id=root)),
            ("start", start(project, grandchild, parent_id=child, trace_id=root)),
            ("start", start(project, other)),
        ],
    )
    r = tr.post("/calls/delete", json={"project_id": project, "call_ids": [root]})
    assert r.status_code == 200 and r.json() == {"num_deleted": 3}
    assert ids(query(tr, project)) == [other]
    assert tr.post("/call/read", json={"project_id": project, "id": child}).json() == {"call": None}
    stats = tr.post("/calls/query_stats", json={"project_id": project}).json()
    assert stats["count"] == 1
    assert tr.post("/calls/delete", json={"project_id": project, "call_ids": [root]}).json() == {
        "num_deleted": 0
    }
    too_many = tr.post(
        "/calls/delete", json={"project_id": project, "call_ids": [new_id() for _ in range(1001)]}
    )
    assert too_many.status_code == 413


@pytest.fixture(scope="module")
def corpus(tr: httpx.Client) -> tuple[str, dict[str, str]]:
    """Ten calls: two ops, one trace of a root with children, numbers and text in inputs."""
    project = new_project()
    names: dict[str, str] = {}
    items: list[tuple[str, dict]] = []
    root = new_id()
    for i in range(10):
        cid = root if i == 0 else new_id()
        names[f"c{i}"] = cid
        op = f"weave:///{project}/op/{'even' if i % 2 == 0 else 'odd'}:d{i % 3}"
        fields = {"inputs": {"n": i, "text": f"Item {i}", "tags": ["a"] * (i % 3)}}
        if i > 0 and i < 4:
            fields.update(parent_id=root, trace_id=root)
        if i in (5, 6):
            fields["thread_id"] = "t1"
        items.append(
            ("start", start(project, cid, op, started_at=f"2025-06-01T12:00:{i:02d}+00:00", **fields))
        )
        if i != 9:
            items.append(
                (
                    "end",
                    end(
                        project,
                        cid,
                        ended_at=f"2025-06-01T12:00:{i:02d}.{i * 100:03d}+00:00",
                        output={"score": i / 10},
                        exception="bad" if i == 7 else None,
                    ),
                )
            )
    upsert(tr, items)
    return project, names


def test_default_order_limit_offset_and_sort(tr: httpx.Client, corpus: tuple[str, dict[str, str]]) -> None:
    project, n = corpus
    every = ids(query(tr, project))
    assert every == [n[f"c{i}"] for i in range(10)]
    assert ids(query(tr, project, limit=3, offset=2)) == every[2:5]
    desc = ids(query(tr, project, sort_by=[{"field": "started_at", "direction": "desc"}]))
    assert desc == every[::-1]
    by_input = ids(query(tr, project, sort_by=[{"field": "inputs.n", "direction": "desc"}], limit=2))
    assert by_input == [n["c9"], n["c8"]]
    by_latency = query(
        tr, project, sort_by=[{"field": "summary.weave.latency_ms", "direction": "desc"}], limit=1
    )
    assert by_latency[0]["id"] == n["c8"]


def test_filters(tr: httpx.Client, corpus: tuple[str, dict[str, str]]) -> None:
    project, n = corpus
    odd = query(tr, project, filter={"op_names": [f"weave:///{project}/op/odd:*"]})
    assert ids(odd) == [n[f"c{i}"] for i in (1, 3, 5, 7, 9)]
    exact = query(tr, project, filter={"op_names": [f"weave:///{project}/op/even:d0"]})
    assert ids(exact) == [n["c0"], n["c6"]]
    roots = query(tr, project, filter={"trace_roots_only": True})
    assert ids(roots) == [n[f"c{i}"] for i in (0, 4, 5, 6, 7, 8, 9)]
    children = query(tr, project, filter={"parent_ids": [n["c0"]]})
    assert ids(children) == [n["c1"], n["c2"], n["c3"]]
    trace = query(tr, project, filter={"trace_ids": [n["c0"]]})
    assert len(trace) == 4
    assert ids(query(tr, project, filter={"call_ids": [n["c4"], n["c2"]]})) == [n["c2"], n["c4"]]
    assert ids(query(tr, project, filter={"thread_ids": ["t1"]})) == [n["c5"], n["c6"]]
    assert query(tr, project, filter={"call_ids": []}) == []


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ({"$eq": [{"$getField": "inputs.n"}, {"$literal": 3}]}, [3]),
        ({"$gt": [{"$getField": "inputs.n"}, {"$literal": 7}]}, [8, 9]),
        ({"$gte": [{"$getField": "inputs.n"}, {"$literal": 8}]}, [8, 9]),
        ({"$lt": [{"$getField": "inputs.n"}, {"$literal": 2}]}, [0, 1]),
        ({"$lte": [{"$getField": "inputs.n"}, {"$literal": 1}]}, [0, 1]),
        ({"$not": [{"$gt": [{"$getField": "inputs.n"}, {"$literal": 1}]}]}, [0, 1]),
        (
            {
                "$and": [
                    {"$gt": [{"$getField": "inputs.n"}, {"$literal": 2}]},
                    {"$lt": [{"$getField": "inputs.n"}, {"$literal": 5}]},
                ]
            },
            [3, 4],
        ),
        (
            {
                "$or": [
                    {"$eq": [{"$getField": "inputs.n"}, {"$literal": 0}]},
                    {"$eq": [{"$getField": "inputs.n"}, {"$literal": 9}]},
                ]
            },
            [0, 9],
        ),
        ({"$in": [{"$getField": "inputs.n"}, [{"$literal": 2}, {"$literal": 4}]]}, [2, 4]),
        ({"$contains": {"input": {"$getField": "inputs.text"}, "substr": "Item 7"}}, [7]),
        (
            {
                "$contains": {
                    "input": {"$getField": "inputs.text"},
                    "substr": "item 7",
                    "case_insensitive": True,
                }
            },
            [7],
        ),
        ({"$eq": [{"$getField": "summary.weave.status"}, {"$literal": "error"}]}, [7]),
        ({"$eq": [{"$getField": "summary.weave.status"}, {"$literal": "running"}]}, [9]),
        ({"$gt": [{"$getField": "summary.weave.latency_ms"}, {"$literal": 700}]}, [8]),
        ({"$eq": [{"$getField": "ended_at"}, {"$literal": None}]}, [9]),
        (
            {
                "$gt": [
                    {"$convert": {"input": {"$getField": "output.score"}, "to": "double"}},
                    {"$literal": 0.75},
                ]
            },
            [8],
        ),
        (
            {"$eq": [{"$convert": {"input": {"$getField": "inputs.n"}, "to": "string"}}, {"$literal": "5"}]},
            [5],
        ),
        ({"$eq": [{"$size": {"$getField": "inputs.tags"}}, {"$literal": 2}]}, [2, 5, 8]),
        ({"$gte": [{"$getField": "started_at"}, {"$literal": "2025-06-01T12:00:08+00:00"}]}, [8, 9]),
        ({"$eq": [{"$getField": "summary.weave.trace_name"}, {"$literal": "odd"}]}, [1, 3, 5, 7, 9]),
    ],
)
def test_query_language(
    tr: httpx.Client, corpus: tuple[str, dict[str, str]], expr: dict, expected: list[int]
) -> None:
    project, n = corpus
    got = query(tr, project, query={"$expr": expr})
    assert ids(got) == [n[f"c{i}"] for i in expected]
    stats = tr.post("/calls/query_stats", json={"project_id": project, "query": {"$expr": expr}}).json()
    assert stats["count"] == len(expected)


def test_columns_and_stats_limit(tr: httpx.Client, corpus: tuple[str, dict[str, str]]) -> None:
    project, _ = corpus
    (call,) = query(tr, project, columns=["inputs"], limit=1)
    assert set(call) == {"id", "trace_id", "project_id", "op_name", "started_at", "inputs"}
    (with_summary,) = query(tr, project, columns=["summary"], limit=1)
    assert {"summary", "ended_at", "exception", "display_name"} <= set(with_summary)
    stats = tr.post("/calls/query_stats", json={"project_id": project, "limit": 4}).json()
    assert stats == {"count": 4, "has_more": True, "total_storage_size_bytes": None}
    assert (
        tr.post("/calls/query_stats", json={"project_id": project, "limit": 40}).json()["has_more"] is False
    )
    largest = tr.post("/calls/query_stats", json={"project_id": project, "limit": 2**63 - 1})
    assert largest.status_code == 200
    assert largest.json() == {"count": 10, "has_more": False, "total_storage_size_bytes": None}


def test_stream_is_json_lines_with_requested_media_type(
    tr: httpx.Client, corpus: tuple[str, dict[str, str]]
) -> None:
    project, _ = corpus
    r = tr.post(
        "/calls/stream_query", json={"project_id": project}, headers={"Accept": "application/x-ndjson"}
    )
    assert r.headers["content-type"].startswith("application/x-ndjson")
    assert len(jsonl(r)) == 10
    r = tr.post("/calls/stream_query", json={"project_id": project})
    assert r.headers["content-type"].startswith("application/jsonl")
    empty = tr.post("/calls/stream_query", json={"project_id": new_project()})
    assert empty.status_code == 200 and empty.content == b""


def test_small_results_come_in_one_body_and_the_rest_streams(
    tr: httpx.Client, corpus: tuple[str, dict[str, str]]
) -> None:
    project, _ = corpus
    small = tr.post("/calls/stream_query", json={"project_id": project, "limit": 1000})
    assert "chunked" not in small.headers.get("transfer-encoding", "")
    assert int(small.headers["content-length"]) == len(small.content)
    assert small.headers["content-type"].startswith("application/jsonl")
    streamed = tr.post("/calls/stream_query", json={"project_id": project, "limit": 1001})
    assert streamed.headers["transfer-encoding"] == "chunked" and "content-length" not in streamed.headers
    assert small.content == streamed.content and len(jsonl(small)) == 10


def test_refs_in_inputs_and_expand_columns(tr: httpx.Client, project: str) -> None:
    digest = tr.post(
        "/obj/create", json={"obj": {"project_id": project, "object_id": "cfg", "val": {"k": 1}}}
    ).json()["digest"]
    ref = f"weave:///{project}/object/cfg:{digest}"
    cid = new_id()
    upsert(tr, [("start", start(project, cid, inputs={"config": ref}))])
    assert ids(query(tr, project, filter={"input_refs": [ref]})) == [cid]
    assert ids(query(tr, project, filter={"input_refs": [f"weave:///{project}/object/cfg:*"]})) == [cid]
    assert query(tr, project, filter={"input_refs": [f"weave:///{project}/object/other:*"]}) == []
    (expanded,) = query(tr, project, expand_columns=["inputs.config"])
    assert expanded["inputs"]["config"] == {"k": 1, "_ref": ref}


def test_costs_on_call_reads(tr: httpx.Client, project: str) -> None:
    cid = new_id()
    usage = {"my-model": {"requests": 1, "prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}}
    upsert(tr, [("start", start(project, cid)), ("end", end(project, cid, summary={"usage": usage}))])
    created = tr.post(
        "/cost/create",
        json={
            "project_id": project,
            "costs": {
                "my-model": {
                    "prompt_token_cost": 0.01,
                    "completion_token_cost": 0.02,
                    "effective_date": "2024-01-01T00:00:00Z",
                }
            },
        },
    )
    assert created.status_code == 200
    call = tr.post("/call/read", json={"project_id": project, "id": cid, "include_costs": True}).json()[
        "call"
    ]
    cost = call["summary"]["weave"]["costs"]["my-model"]
    assert cost["prompt_tokens_total_cost"] == pytest.approx(1.0)
    assert cost["completion_tokens_total_cost"] == pytest.approx(0.2)
    assert cost["pricing_level"] == "project" and cost["prompt_token_cost_unit"] == "USD"
    (streamed,) = query(tr, project, include_costs=True)
    assert streamed["summary"]["weave"]["costs"]["my-model"]["requests"] == 1
    plain = tr.post("/call/read", json={"project_id": project, "id": cid}).json()["call"]
    assert "costs" not in plain["summary"]["weave"]
