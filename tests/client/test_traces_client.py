"""``client.traces`` (typed, sync and async) and opt-in tracing of the toolkit's own completions."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import toolkit as tk
from conftest import LocalServer
from support.traces_helpers import end, new_id, new_project, start
from toolkit import tracing
from toolkit.client import BadRequestError, NotFoundError
from toolkit.client.traces import purge_query
from toolkit.types.traces import Call, CallsFilter, CallsQueryReq


@pytest.fixture(scope="module")
def client(server: LocalServer) -> Iterator[tk.Client]:
    with server.client() as c:
        yield c


@pytest.fixture(scope="module")
def model(client: tk.Client) -> str:
    return client.served_models().data[0].id


def test_typed_calls_and_tree(client: tk.Client) -> None:
    project = new_project()
    root, child, leaf = new_id(), new_id(), new_id()
    res = client.traces.call_start(start=start(project, root, "root", started_at="2025-06-01T12:00:00+00:00"))
    assert res.id == root and res.trace_id == root
    client.traces.call_upsert_batch(
        batch=[
            {
                "mode": "start",
                "req": {
                    "start": start(
                        project,
                        child,
                        "child",
                        parent_id=root,
                        trace_id=root,
                        started_at="2025-06-01T12:00:01+00:00",
                    )
                },
            },
            {
                "mode": "start",
                "req": {
                    "start": start(
                        project,
                        leaf,
                        "leaf",
                        parent_id=child,
                        trace_id=root,
                        started_at="2025-06-01T12:00:02+00:00",
                    )
                },
            },
            {"mode": "end", "req": {"end": end(project, leaf, output=3)}},
        ]
    )
    client.traces.call_end(end=end(project, root, output={"answer": 4}))
    calls = list(client.traces.calls_query(project_id=project))
    assert all(isinstance(c, Call) for c in calls) and [c.op_name for c in calls] == ["root", "child", "leaf"]
    req = CallsQueryReq(project_id=project, filter=CallsFilter(trace_roots_only=True))
    assert [c.id for c in client.traces.calls_query(req)] == [root]
    assert client.traces.calls_query_stats(project_id=project).count == 3
    read = client.traces.call_read(project_id=project, id=root).call
    assert read is not None and read.output == {"answer": 4} and read.summary["weave"]["status"] == "success"
    (tree,) = client.traces.call_tree(project, root)
    assert tree.call.id == root and [n.call.id for n in tree.children] == [child]
    assert [(depth, c.op_name) for depth, c in tree.walk()] == [(0, "root"), (1, "child"), (2, "leaf")]
    client.traces.call_update(project_id=project, call_id=root, display_name="named")
    assert client.traces.calls_delete(project_id=project, call_ids=[child]).num_deleted == 2
    with pytest.raises(NotFoundError):
        client.traces.call_update(project_id=project, call_id=new_id(), display_name="x")


def test_typed_objects_tables_files_feedback_costs(client: tk.Client) -> None:
    project = new_project()
    digest = client.traces.obj_create(
        obj={"project_id": project, "object_id": "cfg", "val": {"b": 2, "a": 1}}
    ).digest
    obj = client.traces.obj_read(project_id=project, object_id="cfg", digest="latest").obj
    assert obj.digest == digest and obj.val == {"b": 2, "a": 1}
    assert [o.object_id for o in client.traces.objs_query(project_id=project).objs] == ["cfg"]
    table = client.traces.table_create(table={"project_id": project, "rows": [{"q": 1}, {"q": 2}]})
    assert [r.val for r in client.traces.table_query(project_id=project, digest=table.digest).rows] == [
        {"q": 1},
        {"q": 2},
    ]
    assert [
        r.original_index for r in client.traces.table_query_stream(project_id=project, digest=table.digest)
    ] == [0, 1]
    assert client.traces.table_query_stats(project_id=project, digest=table.digest).count == 2
    file_digest = client.traces.file_create(project, "obj.py", b"hello").digest
    assert client.traces.file_content_read(project_id=project, digest=file_digest) == b"hello"
    ref = f"weave:///{project}/object/cfg:{digest}/key/a"
    assert client.traces.refs_read_batch(refs=[ref]).vals == [1]
    fb = client.traces.feedback_create(
        project_id=project,
        weave_ref=f"weave:///{project}/call/x",
        feedback_type="wandb.note.1",
        payload={"note": "hi"},
    )
    assert client.traces.feedback_query(project_id=project).total_count == 1
    client.traces.feedback_purge(project_id=project, query=purge_query([fb.id]))
    assert client.traces.feedback_query(project_id=project).total_count == 0
    ids = client.traces.cost_create(
        project_id=project, costs={"m": {"prompt_token_cost": 1, "completion_token_cost": 2}}
    ).ids
    assert [c.llm_id for c in client.traces.cost_query(project_id=project).results] == ["m"]
    client.traces.cost_purge(project_id=project, query=purge_query([ids[0][0]]))
    assert client.traces.cost_query(project_id=project).results == []
    assert client.traces.health().status == "ok"
    info = client.traces.server_info()
    assert (info.trace_server_version, info.min_required_weave_python_version) == (tk.__version__, "0.0.1")
    assert list(client.traces.threads_query(project_id=project)) == []
    with pytest.raises(BadRequestError):
        client.traces.obj_create(obj={"project_id": project, "object_id": "bad id", "val": 1})


async def test_async_client(server: LocalServer) -> None:
    project = new_project()
    async with server.async_client() as client:
        cid = new_id()
        await client.traces.calls_complete(batch=[{**start(project, cid), **end(project, cid, output=1)}])
        calls = [c async for c in client.traces.calls_query(project_id=project)]
        assert [c.id for c in calls] == [cid]
        (tree,) = await client.traces.call_tree(project, cid)
        assert tree.call.output == 1 and tree.children == []
        assert (await client.traces.calls_query_stats(project_id=project)).count == 1


def test_tracing_records_rollouts_and_their_completions(client: tk.Client, model: str) -> None:
    project = new_project()
    tracer = tracing.enable(client, project)
    try:

        def rollout(scenario: int) -> float:
            with tracing.call("rollout", inputs={"scenario": scenario}) as call:
                for _ in range(2):
                    client.chat.completions.create(
                        messages=[{"role": "user", "content": "hi"}], model=model, max_tokens=3
                    )
                assert call is not None
                call.output = {"reward": scenario / 10}
                return scenario / 10

        for scenario in (1, 2):
            rollout(scenario)
        with pytest.raises(ValueError), tracing.call("rollout", inputs={"scenario": 3}):
            raise ValueError("rollout broke")
        tracer.flush()
    finally:
        tracing.disable()
    roots = list(client.traces.calls_query(project_id=project, filter={"trace_roots_only": True}))
    assert [r.op_name for r in roots] == ["rollout"] * 3
    assert roots[2].exception and roots[2].summary["weave"]["status"] == "error"
    (tree,) = client.traces.call_tree(project, roots[0].trace_id)
    assert tree.call.inputs == {"scenario": 1} and tree.call.output == {"reward": 0.1}
    assert [n.call.op_name for n in tree.children] == ["chat.completions.create"] * 2
    child = tree.children[0].call
    assert child.inputs["messages"] == [{"role": "user", "content": "hi"}]
    assert child.output["object"] == "chat.completion"
    usage = child.summary["usage"][model]
    assert (
        usage["requests"] == 1
        and usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    )
    assert "latency_ms" in child.summary["weave"]
    assert tree.call.summary["usage"][model]["requests"] == 2
    assert tree.call.summary["status_counts"] == {"success": 3, "error": 0}


async def test_tracing_async_completions_and_op_decorator(server: LocalServer, model: str) -> None:
    project = new_project()
    async with server.async_client() as client:
        tracing.enable(client, project)
        try:

            @tracing.op
            async def episode(n: int) -> str:
                completion = await client.chat.completions.create(
                    messages=[{"role": "user", "content": "x"}], model=model, max_tokens=2
                )
                return completion.id

            await episode(1)
        finally:
            tracing.disable()
        calls = [c async for c in client.traces.calls_query(project_id=project)]
    names = [c.op_name for c in calls]
    assert names[0].endswith("episode") and names[1:] == ["chat.completions.create"]
    assert calls[1].parent_id == calls[0].id and calls[0].inputs == {"n": 1}
    assert isinstance(calls[0].output, str)


def test_disabled_tracing_records_nothing(client: tk.Client) -> None:
    assert tracing.current_tracer() is None
    with tracing.call("nothing") as call:
        assert call is None

    @tracing.op
    def plain(x: int) -> int:
        return x + 1

    assert plain(1) == 2


def test_tracing_inside_gather_threads(client: tk.Client, model: str) -> None:
    """``gather`` (thread pool) makes each rollout a root call with its completions as children."""
    from toolkit.rollouts import gather, trajectory

    project = new_project()
    tracing.enable(client, project)
    try:

        def rollout(scenario: str) -> Any:  # gather itself makes each rollout a call
            if scenario == "bad":
                raise RuntimeError("no luck")
            messages = [{"role": "user", "content": scenario}]
            completion = client.chat.completions.create(messages=messages, model=model, max_tokens=2)
            return trajectory(messages, completion, reward=1.0)

        groups = gather(["a", "b", "bad"], rollout, group_size=2, max_concurrency=3, progress=False)
    finally:
        tracing.disable()
    assert [len(g.trajectories) for g in groups] == [2, 2, 0]
    roots = list(client.traces.calls_query(project_id=project, filter={"trace_roots_only": True}))
    assert len(roots) == 6
    failed = [r for r in roots if r.inputs == {"scenario": "bad"}]
    assert len(failed) == 2 and all(r.summary["weave"]["status"] == "error" for r in failed)
    for root in roots:
        if root.inputs["scenario"] != "bad":
            assert root.output == {"reward": 1.0, "metrics": {}}
            (tree,) = client.traces.call_tree(project, root.trace_id)
            assert [n.call.op_name for n in tree.children] == ["chat.completions.create"]
