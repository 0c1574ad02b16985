"""Feedback, costs, threads, OTLP export, completions, service routes, auth and tenancy over HTTP."""

from __future__ import annotations

import base64

import httpx
import pytest

from conftest import LocalServer
from support.traces_helpers import end, ids, jsonl, new_id, query, start, traces_http


def put_calls(tr: httpx.Client, *calls: dict) -> None:
    r = tr.post(f"/v2/{calls[0]['project_id']}/calls/complete", json={"batch": list(calls)})
    assert r.status_code == 200, r.text


def complete(project: str, call_id: str, **fields: object) -> dict:
    ended = fields.pop("ended_at", "2025-06-01T12:00:01+00:00")
    return {**start(project, call_id, **fields), **end(project, call_id, ended_at=ended)}


# ----------------------------------------------------------------------------- service and auth


def test_health_and_server_info(server: LocalServer, tr: httpx.Client) -> None:
    assert tr.get("/health").json() == {"status": "ok"}
    info = tr.get("/server_info").json()
    assert set(info) == {"min_required_weave_python_version", "trace_server_version"}
    unauthenticated = httpx.get(f"{server.url}/traces/server_info")
    assert unauthenticated.status_code == 401 and "reason" in unauthenticated.json()


def test_basic_auth_and_wandb_api_key_header(server: LocalServer, project: str) -> None:
    basic = base64.b64encode(f"api:{server.key}".encode()).decode()
    headers = {"Authorization": f"Basic {basic}"}
    r = httpx.post(
        f"{server.url}/traces/call/start",
        json={"start": start(project, new_id())},
        headers=headers,
        timeout=30,
    )
    assert r.status_code == 200
    r = httpx.post(
        f"{server.url}/traces/calls/query_stats",
        json={"project_id": project},
        headers={"wandb-api-key": server.key},
        timeout=30,
    )
    assert r.json()["count"] == 1
    bad = base64.b64encode(b"api:wrong").decode()
    r = httpx.get(f"{server.url}/traces/health", headers={"Authorization": f"Basic {bad}"})
    assert r.status_code == 401


def test_projects_of_one_user_are_invisible_to_another(
    server: LocalServer, tr: httpx.Client, project: str
) -> None:
    cid = new_id()
    put_calls(tr, complete(project, cid))
    tr.post("/obj/create", json={"obj": {"project_id": project, "object_id": "secret", "val": {"x": 1}}})
    tr.post(
        "/feedback/create",
        json={
            "project_id": project,
            "weave_ref": f"weave:///{project}/call/{cid}",
            "feedback_type": "x",
            "payload": {},
        },
    )
    with traces_http(server.url, server.new_user_key(f"other-{new_id()[:8]}")) as other:
        assert query(other, project) == []
        assert other.post("/call/read", json={"project_id": project, "id": cid}).json() == {"call": None}
        assert other.post("/calls/query_stats", json={"project_id": project}).json()["count"] == 0
        read = other.post(
            "/obj/read", json={"project_id": project, "object_id": "secret", "digest": "latest"}
        )
        assert read.status_code == 404
        assert other.post("/objs/query", json={"project_id": project}).json() == {"objs": []}
        assert other.post("/feedback/query", json={"project_id": project}).json()["result"] == []
        assert (
            other.post("/calls/delete", json={"project_id": project, "call_ids": [cid]}).json()["num_deleted"]
            == 0
        )
        # the other user's own project of the same name is separate
        put_calls(other, complete(project, new_id()))
        assert len(query(other, project)) == 1
    assert ids(query(tr, project)) == [cid]


# ----------------------------------------------------------------------------- feedback


def test_feedback_create_query_replace_purge(tr: httpx.Client, project: str) -> None:
    cid = new_id()
    put_calls(tr, complete(project, cid))
    ref = f"weave:///{project}/call/{cid}"
    reaction = tr.post(
        "/feedback/create",
        json={
            "project_id": project,
            "weave_ref": ref,
            "feedback_type": "wandb.reaction.1",
            "payload": {"emoji": "👍🏽"},
        },
    )
    assert reaction.status_code == 200
    body = reaction.json()
    assert set(body) == {"id", "created_at", "wb_user_id", "payload"}
    assert body["payload"]["emoji"] == "👍🏽" and body["payload"]["detoned"] == "👍"
    assert body["payload"]["alias"].startswith(":") and body["payload"]["detoned_alias"]
    note = tr.post(
        "/feedback/create",
        json={
            "id": "client-chosen",
            "project_id": project,
            "weave_ref": ref,
            "feedback_type": "wandb.note.1",
            "payload": {"note": "good"},
            "creator": "me",
        },
    ).json()
    assert note["id"] == "client-chosen"
    q = tr.post("/feedback/query", json={"project_id": project}).json()
    assert q["total_count"] == 2 and [r["feedback_type"] for r in q["result"]] == [
        "wandb.reaction.1",
        "wandb.note.1",
    ]
    assert q["result"][1]["payload"] == {"note": "good"} and q["result"][1]["project_id"] == project
    picked = tr.post(
        "/feedback/query",
        json={
            "project_id": project,
            "fields": ["id", "payload.note"],
            "query": {"$expr": {"$eq": [{"$getField": "feedback_type"}, {"$literal": "wandb.note.1"}]}},
        },
    ).json()
    assert picked == {"result": [{"id": "client-chosen", "payload.note": "good"}], "total_count": 1}
    page = tr.post(
        "/feedback/query",
        json={"project_id": project, "sort_by": [{"field": "created_at", "direction": "desc"}], "limit": 1},
    ).json()
    assert page["total_count"] == 2 and page["result"][0]["id"] == "client-chosen"
    replaced = tr.post(
        "/feedback/replace",
        json={
            "feedback_id": "client-chosen",
            "project_id": project,
            "weave_ref": ref,
            "feedback_type": "wandb.note.1",
            "payload": {"note": "better"},
        },
    ).json()
    assert replaced["id"] != "client-chosen"
    notes = tr.post(
        "/feedback/query",
        json={
            "project_id": project,
            "query": {"$expr": {"$eq": [{"$getField": "payload.note"}, {"$literal": "better"}]}},
        },
    ).json()
    assert [r["id"] for r in notes["result"]] == [replaced["id"]]
    purge = {"$expr": {"$eq": [{"$getField": "id"}, {"$literal": body["id"]}]}}
    assert tr.post("/feedback/purge", json={"project_id": project, "query": purge}).json() == {}
    assert tr.post("/feedback/query", json={"project_id": project}).json()["total_count"] == 1
    bad_purge = {"$expr": {"$eq": [{"$getField": "feedback_type"}, {"$literal": "x"}]}}
    r = tr.post("/feedback/purge", json={"project_id": project, "query": bad_purge})
    assert r.status_code == 400 and "feedback ids" in r.json()["reason"]


@pytest.mark.parametrize(
    ("kind", "payload", "extra"),
    [
        ("wandb.reaction.1", {"emoji": "not an emoji"}, {}),
        ("wandb.reaction.1", {"emoji": "👍👎"}, {}),
        ("wandb.note.1", {"note": ""}, {}),
        ("wandb.note.1", {"note": "x" * 1025}, {}),
        ("wandb.annotation.score", {"value": 1}, {}),
        ("wandb.runnable.judge", {"output": 1}, {}),
        ("custom", {}, {"call_ref": "weave:///a/b/call/c"}),
        ("custom", {"big": "x" * (1 << 20)}, {}),
    ],
)
def test_feedback_validation(tr: httpx.Client, project: str, kind: str, payload: dict, extra: dict) -> None:
    r = tr.post(
        "/feedback/create",
        json={
            "project_id": project,
            "weave_ref": f"weave:///{project}/call/x",
            "feedback_type": kind,
            "payload": payload,
            **extra,
        },
    )
    assert r.status_code == 400 and "reason" in r.json()


def test_feedback_batch_and_include_feedback(tr: httpx.Client, project: str) -> None:
    a, b = new_id(), new_id()
    put_calls(tr, complete(project, a), complete(project, b))
    batch = [
        {
            "id": f"fb-{i}",
            "project_id": project,
            "weave_ref": f"weave:///{project}/call/{a}",
            "feedback_type": "score",
            "payload": {"v": i},
        }
        for i in range(3)
    ]
    r = tr.post("/feedback/batch/create", json={"batch": batch})
    assert r.status_code == 200 and [x["id"] for x in r.json()["res"]] == ["fb-0", "fb-1", "fb-2"]
    bad = [*batch, {**batch[0], "id": "fb-bad", "feedback_type": "wandb.note.1", "payload": {}}]
    assert tr.post("/feedback/batch/create", json={"batch": bad}).status_code == 400
    assert tr.post("/feedback/query", json={"project_id": project}).json()["total_count"] == 3
    calls = {c["id"]: c for c in query(tr, project, include_feedback=True)}
    assert [f["payload"]["v"] for f in calls[a]["summary"]["weave"]["feedback"]] == [0, 1, 2]
    assert calls[b]["summary"]["weave"]["feedback"] == []
    by_feedback = query(
        tr, project, query={"$expr": {"$eq": [{"$getField": "feedback.[score].payload.v"}, {"$literal": 2}]}}
    )
    assert ids(by_feedback) == [a]


# ----------------------------------------------------------------------------- costs


def test_cost_create_query_purge(tr: httpx.Client, project: str) -> None:
    r = tr.post(
        "/cost/create",
        json={
            "project_id": project,
            "costs": {
                "m1": {"prompt_token_cost": 1e-06, "completion_token_cost": 2e-06},
                "m2": {"prompt_token_cost": 3, "completion_token_cost": 4, "provider_id": "acme"},
            },
        },
    )
    assert r.status_code == 200
    created = r.json()["ids"]
    assert [llm for _, llm in created] == ["m1", "m2"]
    results = tr.post(
        "/cost/query",
        json={
            "project_id": project,
            "fields": ["id", "llm_id", "prompt_token_cost", "completion_token_cost"],
        },
    ).json()["results"]
    assert results == [
        {"id": created[0][0], "llm_id": "m1", "prompt_token_cost": 1e-06, "completion_token_cost": 2e-06},
        {"id": created[1][0], "llm_id": "m2", "prompt_token_cost": 3.0, "completion_token_cost": 4.0},
    ]
    full = tr.post(
        "/cost/query",
        json={
            "project_id": project,
            "query": {"$expr": {"$eq": [{"$getField": "llm_id"}, {"$literal": "m2"}]}},
        },
    ).json()["results"]
    assert len(full) == 1 and full[0]["provider_id"] == "acme" and full[0]["prompt_token_cost_unit"] == "USD"
    assert full[0]["effective_date"].endswith("Z")
    purge = {"$expr": {"$in": [{"$getField": "id"}, [{"$literal": created[0][0]}]]}}
    assert tr.post("/cost/purge", json={"project_id": project, "query": purge}).json() == {}
    assert [c["llm_id"] for c in tr.post("/cost/query", json={"project_id": project}).json()["results"]] == [
        "m2"
    ]
    bad = {"$expr": {"$eq": [{"$getField": "llm_id"}, {"$literal": "m2"}]}}
    assert tr.post("/cost/purge", json={"project_id": project, "query": bad}).status_code == 400
    missing = tr.post("/cost/create", json={"project_id": project, "costs": {"m": {"prompt_token_cost": 1}}})
    assert missing.status_code == 422


# ----------------------------------------------------------------------------- threads


def test_threads_group_turns(tr: httpx.Client, project: str) -> None:
    calls = []
    for thread, n, base in (("t-a", 3, 0), ("t-b", 1, 10)):
        for i in range(n):
            turn = new_id()
            calls.append(
                complete(
                    project,
                    turn,
                    thread_id=thread,
                    turn_id=turn,
                    started_at=f"2025-06-01T12:00:{base + i * 2:02d}+00:00",
                    ended_at=f"2025-06-01T12:00:{base + i * 2 + 1:02d}+00:00",
                )
            )
            child = new_id()
            calls.append(
                complete(project, child, thread_id=thread, turn_id=turn, parent_id=turn, trace_id=turn)
            )
    calls.append(complete(project, new_id()))
    put_calls(tr, *calls)
    r = tr.post("/threads/stream_query", json={"project_id": project})
    threads = jsonl(r)
    assert [t["thread_id"] for t in threads] == ["t-b", "t-a"]
    a = threads[1]
    assert a["turn_count"] == 3
    assert (
        a["start_time"] == "2025-06-01T12:00:00.000000Z"
        and a["last_updated"] == "2025-06-01T12:00:05.000000Z"
    )
    assert a["first_turn_id"] == calls[0]["id"] and a["last_turn_id"] == calls[4]["id"]
    assert a["p50_turn_duration_ms"] == 1000.0 and a["p99_turn_duration_ms"] == 1000.0
    only = jsonl(
        tr.post("/threads/stream_query", json={"project_id": project, "filter": {"thread_ids": ["t-a"]}})
    )
    assert [t["thread_id"] for t in only] == ["t-a"]
    by_count = jsonl(
        tr.post(
            "/threads/stream_query",
            json={
                "project_id": project,
                "sort_by": [{"field": "turn_count", "direction": "desc"}],
                "limit": 1,
            },
        )
    )
    assert [t["thread_id"] for t in by_count] == ["t-a"]
    bad = tr.post(
        "/threads/stream_query",
        json={"project_id": project, "sort_by": [{"field": "nope", "direction": "asc"}]},
    )
    assert bad.status_code == 400


# ----------------------------------------------------------------------------- OpenTelemetry


def test_otlp_protobuf_export_becomes_calls(server: LocalServer, project: str) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace import Status, StatusCode

    entity, name = project.split("/")
    exporter = OTLPSpanExporter(
        endpoint=f"{server.url}/traces/otel/v1/traces", headers={"Authorization": f"Bearer {server.key}"}
    )
    provider = TracerProvider(resource=Resource.create({"wandb.entity": entity, "wandb.project": name}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("agent") as root:
        root.set_attribute("input.value", '{"question": "hi"}')
        root.set_attribute("gen_ai.conversation.id", "conv-1")
        with tracer.start_as_current_span("llm") as llm:
            llm.set_attribute("gen_ai.request.model", "tiny")
            llm.set_attribute("gen_ai.usage.prompt_tokens", 7)
            llm.set_attribute("gen_ai.usage.completion_tokens", 3)
            llm.set_attribute("gen_ai.completion", "hello")
        with tracer.start_as_current_span("tool") as tool:
            tool.set_status(Status(StatusCode.ERROR, "tool failed"))
    provider.shutdown()
    with traces_http(server.url, server.key) as tr:
        calls = {c["op_name"]: c for c in query(tr, project)}
    assert set(calls) == {"agent", "llm", "tool"}
    root_call, llm_call, tool_call = calls["agent"], calls["llm"], calls["tool"]
    assert len(root_call["id"]) == 16 and len(root_call["trace_id"]) == 32
    assert llm_call["parent_id"] == root_call["id"] and llm_call["trace_id"] == root_call["trace_id"]
    assert root_call["inputs"] == {"input.value": {"question": "hi"}}
    assert root_call["thread_id"] == "conv-1" and root_call["turn_id"] == root_call["id"]
    assert llm_call["attributes"]["model"] == "tiny"
    assert llm_call["summary"]["usage"] == {"tiny": {"prompt_tokens": 7, "completion_tokens": 3}}
    assert llm_call["output"] == {"gen_ai.completion": "hello"}
    assert tool_call["exception"] == "tool failed" and tool_call["summary"]["weave"]["status"] == "error"
    assert "otel_span" in llm_call["attributes"]


def test_otlp_json_export_and_bad_bodies(server: LocalServer, tr: httpx.Client, project: str) -> None:
    span = {
        "traceId": "5b8efff798038103d269b633813fc60c",
        "spanId": "eee19b7ec3c1b174",
        "name": "json-span",
        "startTimeUnixNano": "1748779200000000000",
        "endTimeUnixNano": "1748779201500000000",
        "attributes": [{"key": "input", "value": {"stringValue": '{"a": 1}'}}],
    }
    body = {"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": [span]}]}]}
    r = tr.post("/otel/v1/trace", json={**body, "project_id": project})
    assert r.status_code == 200 and r.json() == {"partial_success": None}
    (call,) = query(tr, project)
    assert call["id"] == "eee19b7ec3c1b174" and call["trace_id"] == "5b8efff798038103d269b633813fc60c"
    assert call["inputs"] == {"a": 1} and call["summary"]["weave"]["latency_ms"] == 1500
    assert call["started_at"] == "2025-06-01T12:00:00.000000Z"
    r = tr.post("/otel/v1/traces", json=body, headers={"project_id": project})
    assert r.status_code == 200
    garbage = tr.post(
        "/otel/v1/traces", content=b"\xff\xfe garbage", headers={"Content-Type": "application/x-protobuf"}
    )
    assert garbage.status_code == 400 and "reason" in garbage.json()
    no_project = tr.post("/otel/v1/trace", json=body)
    assert no_project.status_code == 400


# ----------------------------------------------------------------------------- completions


def test_completions_are_recorded_as_calls(server: LocalServer, tr: httpx.Client, project: str) -> None:
    model = server.client().served_models().data[0].id
    inputs = {
        "model": model,
        "messages": [{"role": "user", "content": "Say {word}"}],
        "max_tokens": 4,
        "template_vars": {"word": "hi"},
    }
    r = tr.post("/completions/create", json={"project_id": project, "inputs": inputs})
    assert r.status_code == 200
    res = r.json()
    assert res["response"]["object"] == "chat.completion" and res["weave_call_id"]
    call = tr.post("/call/read", json={"project_id": project, "id": res["weave_call_id"]}).json()["call"]
    assert call["op_name"] == "weave.completions_create"
    assert call["inputs"]["messages"] == inputs["messages"]
    usage = call["summary"]["usage"][model]
    assert (
        usage["completion_tokens"] == res["response"]["usage"]["completion_tokens"] and usage["requests"] == 1
    )
    assert call["output"]["choices"] == res["response"]["choices"]

    r = tr.post("/completions/create_stream", json={"project_id": project, "inputs": inputs})
    lines = jsonl(r)
    meta, chunks = lines[0]["_meta"], lines[1:]
    assert chunks and all(c["object"] == "chat.completion.chunk" for c in chunks)
    streamed = tr.post("/call/read", json={"project_id": project, "id": meta["weave_call_id"]}).json()["call"]
    text = "".join((ch.get("delta") or {}).get("content") or "" for c in chunks for ch in c["choices"])
    assert streamed["output"]["choices"][0]["message"]["content"] == text
    assert (
        streamed["summary"]["weave"]["status"] == "success"
        and streamed["summary"]["usage"][model]["requests"] == 1
    )

    unknown = tr.post(
        "/completions/create", json={"project_id": project, "inputs": {"model": "nope", "messages": []}}
    )
    assert unknown.status_code == 200 and "error" in unknown.json()["response"]
    failed = tr.post(
        "/call/read", json={"project_id": project, "id": unknown.json()["weave_call_id"]}
    ).json()["call"]
    assert failed["exception"] and failed["summary"]["weave"]["status"] == "error"
    untracked = tr.post(
        "/completions/create", json={"project_id": project, "inputs": inputs, "track_llm_call": False}
    ).json()
    assert set(untracked) == {"response"} and untracked["response"]["object"] == "chat.completion"
    assert len(query(tr, project)) == 3
