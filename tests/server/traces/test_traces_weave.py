"""Weave's own client code against ``/traces``: its ``RemoteHTTPTraceServer`` (weave 0.52.38) writes
calls, objects, tables, files, feedback and costs, and reads them back unchanged."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from weave.trace_server import trace_server_interface as tsi
from weave.trace_server_bindings.remote_http_trace_server import RemoteHTTPTraceServer

from conftest import LocalServer
from toolkit._version import __version__

UTC = datetime.UTC
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _id() -> str:
    return str(uuid.uuid4())


@pytest.fixture
def project() -> str:
    return f"weave-compat/p{uuid.uuid4().hex[:10]}"


@pytest.fixture
def remote(server: LocalServer) -> Iterator[RemoteHTTPTraceServer]:
    yield RemoteHTTPTraceServer(f"{server.url}/traces", should_batch=False, auth=("api", server.key))


def _start(
    project: str, call_id: str, trace_id: str, parent_id: str | None, op: str, at: datetime.datetime
) -> Any:
    return tsi.StartedCallSchemaForInsert(
        project_id=project,
        id=call_id,
        trace_id=trace_id,
        parent_id=parent_id,
        op_name=op,
        started_at=at,
        attributes={"weave": {"client_version": "0.52.38", "source": "python-sdk"}, "tag": [1, 2]},
        inputs={"question": "2+2?", "nested": {"a": [1, {"b": None}]}, "unicode": "héllo ✓"},
        thread_id="thread-1",
        turn_id=call_id if parent_id is None else None,
    )


def _end(project: str, call_id: str, at: datetime.datetime, output: Any, summary: dict[str, Any]) -> Any:
    return tsi.EndedCallSchemaForInsert(
        project_id=project, id=call_id, ended_at=at, output=output, summary=summary, exception=None
    )


def test_calls_round_trip(remote: RemoteHTTPTraceServer, project: str) -> None:
    t0 = datetime.datetime(2025, 6, 1, 12, 0, 0, 123456, tzinfo=UTC)
    root, child = _id(), _id()
    ms = datetime.timedelta(milliseconds=1)
    op = f"weave:///{project}/op/answer:2El9nYJ3CnBykmEJWqmPfvUVTXr0mfgDe2yiUClnhaY"
    started = remote.call_start(tsi.CallStartReq(start=_start(project, root, root, None, op, t0)))
    assert (started.id, started.trace_id) == (root, root)
    usage = {"gpt-4o-mini": {"requests": 1, "prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13}}
    summary = {"usage": usage, "status_counts": {"success": 1, "error": 0}}
    batch = tsi.CallCreateBatchReq(
        batch=[
            tsi.CallBatchStartMode(
                req=tsi.CallStartReq(start=_start(project, child, root, root, "child", t0 + ms))
            ),
            tsi.CallBatchEndMode(req=tsi.CallEndReq(end=_end(project, child, t0 + 5 * ms, [1, 2], {}))),
        ]
    )
    assert [r.model_dump(exclude_none=True) for r in remote.call_start_batch(batch).res] == [
        {"id": child, "trace_id": root},
        {},
    ]
    remote.call_end(tsi.CallEndReq(end=_end(project, root, t0 + datetime.timedelta(seconds=1), "4", summary)))

    call = remote.call_read(tsi.CallReadReq(project_id=project, id=root)).call
    assert call is not None
    assert call.op_name == op and call.trace_id == root and call.parent_id is None
    assert call.started_at == t0 and call.ended_at == t0 + datetime.timedelta(seconds=1)
    assert call.inputs == {"question": "2+2?", "nested": {"a": [1, {"b": None}]}, "unicode": "héllo ✓"}
    assert call.attributes == {"weave": {"client_version": "0.52.38", "source": "python-sdk"}, "tag": [1, 2]}
    assert call.output == "4" and call.thread_id == "thread-1" and call.turn_id == root
    assert call.summary is not None and call.summary["usage"] == usage
    assert call.summary["weave"]["status"] == "success" and call.summary["weave"]["latency_ms"] == 1000
    assert call.summary["weave"]["trace_name"] == "answer"

    calls = list(remote.calls_query_stream(tsi.CallsQueryReq(project_id=project)))
    assert [c.id for c in calls] == [root, child] and calls[1].output == [1, 2]
    roots = remote.calls_query(
        tsi.CallsQueryReq(
            project_id=project,
            filter=tsi.CallsFilter(trace_roots_only=True),
            query=tsi.Query.model_validate(
                {"$expr": {"$gt": [{"$getField": "summary.weave.latency_ms"}, {"$literal": 500}]}}
            ),
            sort_by=[tsi.SortBy(field="started_at", direction="desc")],
            limit=10,
        )
    ).calls
    assert [c.id for c in roots] == [root]
    assert remote.calls_query_stats(tsi.CallsQueryStatsReq(project_id=project)).count == 2
    threads = list(remote.threads_query_stream(tsi.ThreadsQueryReq(project_id=project)))
    assert [(t.thread_id, t.turn_count) for t in threads] == [("thread-1", 1)]

    remote.call_update(tsi.CallUpdateReq(project_id=project, call_id=root, display_name="renamed"))
    renamed = remote.call_read(tsi.CallReadReq(project_id=project, id=root)).call
    assert renamed is not None and renamed.display_name == "renamed"
    assert remote.calls_delete(tsi.CallsDeleteReq(project_id=project, call_ids=[root])).num_deleted == 2
    assert list(remote.calls_query_stream(tsi.CallsQueryReq(project_id=project))) == []


def test_objects_tables_files_refs(remote: RemoteHTTPTraceServer, project: str) -> None:
    source = b"def answer(question):\n    return '4'\n"
    file_digest = remote.file_create(
        tsi.FileCreateReq(project_id=project, name="obj.py", content=source)
    ).digest
    assert (
        remote.file_content_read(tsi.FileContentReadReq(project_id=project, digest=file_digest)).content
        == source
    )
    op_val = {"_type": "CustomWeaveType", "weave_type": {"type": "Op"}, "files": {"obj.py": file_digest}}
    op_digest = remote.obj_create(
        tsi.ObjCreateReq(obj=tsi.ObjSchemaForInsert(project_id=project, object_id="answer", val=op_val))
    ).digest
    rows = [{"q": "hi", "a": "x"}, {"q": "yo"}]
    table = remote.table_create(
        tsi.TableCreateReq(table=tsi.TableSchemaForInsert(project_id=project, rows=rows))
    )
    assert table.digest == "39bea9a7955d91f81d0fb001b63b7de3c4c51f0c7d53d6fb4b89320737642287"
    dataset = {
        "_type": "Dataset",
        "name": "qa",
        "rows": f"weave:///{project}/table/{table.digest}",
        "_class_name": "Dataset",
        "_bases": ["Object", "BaseModel"],
    }
    ds_digest = remote.obj_create(
        tsi.ObjCreateReq(obj=tsi.ObjSchemaForInsert(project_id=project, object_id="qa", val=dataset))
    ).digest

    op = remote.obj_read(tsi.ObjReadReq(project_id=project, object_id="answer", digest=op_digest)).obj
    assert op.kind == "op" and op.val == op_val and op.version_index == 0 and op.is_latest == 1
    ds = remote.obj_read(tsi.ObjReadReq(project_id=project, object_id="qa", digest="latest")).obj
    assert ds.digest == ds_digest and ds.val == dataset and ds.leaf_object_class == "Dataset"
    ops = remote.objs_query(
        tsi.ObjQueryReq(project_id=project, filter=tsi.ObjectVersionFilter(is_op=True))
    ).objs
    assert [o.object_id for o in ops] == ["answer"]

    got = remote.table_query(tsi.TableQueryReq(project_id=project, digest=table.digest)).rows
    assert [r.val for r in got] == rows and [r.digest for r in got] == table.row_digests
    assert (
        remote.table_query_stats(tsi.TableQueryStatsReq(project_id=project, digest=table.digest)).count == 2
    )
    updated = remote.table_update(
        tsi.TableUpdateReq(
            project_id=project,
            base_digest=table.digest,
            updates=[tsi.TableAppendSpec(append=tsi.TableAppendSpecPayload(row={"q": "new"}))],
        )
    )
    appended = remote.table_query(tsi.TableQueryReq(project_id=project, digest=updated.digest)).rows
    assert [r.val for r in appended] == [*rows, {"q": "new"}]

    refs = [
        f"weave:///{project}/object/qa:{ds_digest}",
        f"weave:///{project}/object/qa:{ds_digest}/attr/rows/id/{table.row_digests[1]}",
        f"weave:///{project}/op/answer:{op_digest}",
    ]
    assert remote.refs_read_batch(tsi.RefsReadBatchReq(refs=refs)).vals == [dataset, rows[1], op_val]
    deleted = remote.obj_delete(tsi.ObjDeleteReq(project_id=project, object_id="qa"))
    assert deleted.num_deleted == 1


def test_feedback_and_costs(remote: RemoteHTTPTraceServer, project: str) -> None:
    call_id = _id()
    now = datetime.datetime.now(UTC)
    remote.call_start(tsi.CallStartReq(start=_start(project, call_id, call_id, None, "scored", now)))
    remote.call_end(
        tsi.CallEndReq(end=_end(project, call_id, now, 1, {"usage": {"m": {"prompt_tokens": 10}}}))
    )
    ref = f"weave:///{project}/call/{call_id}"
    note = remote.feedback_create(
        tsi.FeedbackCreateReq(
            project_id=project, weave_ref=ref, feedback_type="wandb.note.1", payload={"note": "ok"}
        )
    )
    batch = remote.feedback_create_batch(
        tsi.FeedbackCreateBatchReq(
            batch=[
                tsi.FeedbackCreateReq(
                    id=f"fb-{i}", project_id=project, weave_ref=ref, feedback_type="score", payload={"v": i}
                )
                for i in range(2)
            ]
        )
    )
    assert [r.id for r in batch.res] == ["fb-0", "fb-1"]
    rows = remote.feedback_query(tsi.FeedbackQueryReq(project_id=project)).result
    assert [(r["feedback_type"], r["payload"]) for r in rows] == [
        ("wandb.note.1", {"note": "ok"}),
        ("score", {"v": 0}),
        ("score", {"v": 1}),
    ]
    replaced = remote.feedback_replace(
        tsi.FeedbackReplaceReq(
            project_id=project,
            weave_ref=ref,
            feedback_type="wandb.note.1",
            payload={"note": "better"},
            feedback_id=note.id,
        )
    )
    remote.feedback_purge(
        tsi.FeedbackPurgeReq(
            project_id=project,
            query=tsi.Query.model_validate({"$expr": {"$eq": [{"$getField": "id"}, {"$literal": "fb-0"}]}}),
        )
    )
    left = remote.feedback_query(tsi.FeedbackQueryReq(project_id=project, fields=["id"])).result
    assert sorted(r["id"] for r in left) == sorted([replaced.id, "fb-1"])
    (with_feedback,) = remote.calls_query_stream(tsi.CallsQueryReq(project_id=project, include_feedback=True))
    assert with_feedback.summary is not None and len(with_feedback.summary["weave"]["feedback"]) == 2

    created = remote.cost_create(
        tsi.CostCreateReq(
            project_id=project,
            costs={
                "m": tsi.CostCreateInput(
                    prompt_token_cost=0.5,
                    completion_token_cost=1.0,
                    effective_date=now - datetime.timedelta(days=1),
                )
            },
        )
    )
    (cost_id, llm_id) = created.ids[0]
    assert llm_id == "m"
    costs = remote.cost_query(tsi.CostQueryReq(project_id=project)).results
    assert [(c.id, c.llm_id, c.prompt_token_cost) for c in costs] == [(cost_id, "m", 0.5)]
    call = remote.call_read(tsi.CallReadReq(project_id=project, id=call_id, include_costs=True)).call
    assert call is not None and call.summary is not None
    assert call.summary["weave"]["costs"]["m"]["prompt_tokens_total_cost"] == pytest.approx(5.0)
    remote.cost_purge(
        tsi.CostPurgeReq(
            project_id=project,
            query=tsi.Query.model_validate({"$expr": {"$eq": [{"$getField": "id"}, {"$literal": cost_id}]}}),
        )
    )
    assert remote.cost_query(tsi.CostQueryReq(project_id=project)).results == []


@pytest.mark.parametrize("calls_complete", [False, True])
def test_batching_client_paths(
    server: LocalServer, project: str, monkeypatch: pytest.MonkeyPatch, calls_complete: bool
) -> None:
    """The batching client: ``/call/upsert_batch`` (legacy) or ``/v2/.../calls/complete`` (newer
    default), and ``/feedback/batch/create``."""
    monkeypatch.setenv("WEAVE_USE_CALLS_COMPLETE", "true" if calls_complete else "false")
    remote = RemoteHTTPTraceServer(f"{server.url}/traces", should_batch=True, auth=("api", server.key))
    assert remote.use_calls_complete is calls_complete
    now = datetime.datetime.now(UTC)
    ids = [_id() for _ in range(20)]
    for call_id in ids:
        remote.call_start(tsi.CallStartReq(start=_start(project, call_id, call_id, None, "batched", now)))
        remote.call_end(tsi.CallEndReq(end=_end(project, call_id, now, {"id": call_id}, {})))
    remote.feedback_create(
        tsi.FeedbackCreateReq(
            project_id=project,
            weave_ref=f"weave:///{project}/call/{ids[0]}",
            feedback_type="x",
            payload={"k": 1},
        )
    )
    assert remote.call_processor is not None and remote.feedback_processor is not None
    remote.call_processor.stop_accepting_new_work_and_flush_queue()
    remote.feedback_processor.stop_accepting_new_work_and_flush_queue()
    reader = RemoteHTTPTraceServer(f"{server.url}/traces", should_batch=False, auth=("api", server.key))
    calls = list(reader.calls_query_stream(tsi.CallsQueryReq(project_id=project)))
    assert sorted(c.id for c in calls) == sorted(ids)
    assert all(c.output == {"id": c.id} for c in calls)
    assert len(reader.feedback_query(tsi.FeedbackQueryReq(project_id=project)).result) == 1
    assert reader.server_info().trace_server_version == __version__
