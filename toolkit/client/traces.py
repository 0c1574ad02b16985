"""Trace service resource (``client.traces``): every operation of the Weave trace-server contract.

Method names follow Weave's trace-server interface (``call_start``, ``calls_query``, ``obj_read``,
...). Each takes its request model, or the same fields as keywords, and returns the typed response;
stream queries return iterators that read the JSON Lines as they arrive. :meth:`Traces.call_tree`
nests the calls of one trace.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel

from ..types import traces as t
from ._transport import AsyncTransport, Op, SyncTransport

R = TypeVar("R", bound=BaseModel)


def request(model: type[R], req: R | Mapping[str, Any] | None, fields: Mapping[str, Any]) -> R:
    """The request model from a model instance, a mapping, or keyword fields."""
    if isinstance(req, model):
        return req.model_copy(update=dict(fields)) if fields else req
    return model.model_validate({**(dict(req) if req else {}), **fields})


def body(req: BaseModel) -> Any:
    return req.model_dump(mode="json", by_alias=True, exclude_none=True)


def _post(path: str, req: BaseModel, parse: Any, *, idempotent: bool = False) -> Op[Any]:
    return Op("POST", path, parse, service="traces", json=body(req), idempotent=idempotent)


def _stream(path: str, req: BaseModel, parse: Any) -> Op[Any]:
    return Op(
        "POST",
        path,
        parse,
        service="traces",
        json=body(req),
        stream="jsonl",
        idempotent=True,
        headers={"Accept": "application/jsonl"},
    )


# ----------------------------------------------------------------------------- operation builders


def op_server_info() -> Op[t.ServerInfo]:
    return Op("GET", "/server_info", t.ServerInfo.model_validate, service="traces")


def op_health() -> Op[t.TraceHealth]:
    return Op("GET", "/health", t.TraceHealth.model_validate, service="traces")


def op_call_start(req: t.CallStartReq) -> Op[t.CallStartRes]:
    return _post("/call/start", req, t.CallStartRes.model_validate, idempotent=True)


def op_call_end(req: t.CallEndReq) -> Op[t.Empty]:
    return _post("/call/end", req, t.Empty.model_validate, idempotent=True)


def op_call_upsert_batch(req: t.CallCreateBatchReq) -> Op[t.CallCreateBatchRes]:
    return _post("/call/upsert_batch", req, t.CallCreateBatchRes.model_validate, idempotent=True)


def op_calls_complete(req: t.CallsCompleteReq) -> Op[t.Empty]:
    project = req.batch[0].project_id if req.batch else "_/_"
    return _post(f"/v2/{project}/calls/complete", req, t.Empty.model_validate, idempotent=True)


def op_call_read(req: t.CallReadReq) -> Op[t.CallReadRes]:
    return _post("/call/read", req, t.CallReadRes.model_validate, idempotent=True)


def op_call_update(req: t.CallUpdateReq) -> Op[t.Empty]:
    return _post("/call/update", req, t.Empty.model_validate, idempotent=True)


def op_calls_delete(req: t.CallsDeleteReq) -> Op[t.CallsDeleteRes]:
    return _post("/calls/delete", req, t.CallsDeleteRes.model_validate)


def op_calls_query(req: t.CallsQueryReq) -> Op[t.Call]:
    return _stream("/calls/stream_query", req, t.Call.model_validate)


def op_calls_query_stats(req: t.CallsQueryStatsReq) -> Op[t.CallsQueryStatsRes]:
    return _post("/calls/query_stats", req, t.CallsQueryStatsRes.model_validate, idempotent=True)


def op_obj_create(req: t.ObjCreateReq) -> Op[t.ObjCreateRes]:
    return _post("/obj/create", req, t.ObjCreateRes.model_validate, idempotent=True)


def op_obj_read(req: t.ObjReadReq) -> Op[t.ObjReadRes]:
    return _post("/obj/read", req, t.ObjReadRes.model_validate, idempotent=True)


def op_objs_query(req: t.ObjQueryReq) -> Op[t.ObjQueryRes]:
    return _post("/objs/query", req, t.ObjQueryRes.model_validate, idempotent=True)


def op_obj_delete(req: t.ObjDeleteReq) -> Op[t.ObjDeleteRes]:
    return _post("/obj/delete", req, t.ObjDeleteRes.model_validate)


def op_table_create(req: t.TableCreateReq) -> Op[t.TableCreateRes]:
    return _post("/table/create", req, t.TableCreateRes.model_validate, idempotent=True)


def op_table_update(req: t.TableUpdateReq) -> Op[t.TableUpdateRes]:
    return _post("/table/update", req, t.TableUpdateRes.model_validate, idempotent=True)


def op_table_query(req: t.TableQueryReq) -> Op[t.TableQueryRes]:
    return _post("/table/query", req, t.TableQueryRes.model_validate, idempotent=True)


def op_table_query_stream(req: t.TableQueryReq) -> Op[t.TableRow]:
    return _stream("/table/query_stream", req, t.TableRow.model_validate)


def op_table_query_stats(req: t.TableQueryStatsReq) -> Op[t.TableQueryStatsRes]:
    return _post("/table/query_stats", req, t.TableQueryStatsRes.model_validate, idempotent=True)


def op_refs_read_batch(req: t.RefsReadBatchReq) -> Op[t.RefsReadBatchRes]:
    return _post("/refs/read_batch", req, t.RefsReadBatchRes.model_validate, idempotent=True)


def op_file_create(project_id: str, name: str, content: bytes) -> Op[t.FileCreateRes]:
    return Op(
        "POST",
        "/file/create",
        t.FileCreateRes.model_validate,
        service="traces",
        data={"project_id": project_id},
        files={"file": (name, content, "application/octet-stream")},
        idempotent=True,
    )


def op_file_content(req: t.FileContentReadReq) -> Op[bytes]:
    return Op("POST", "/file/content", bytes, service="traces", json=body(req), raw=True, idempotent=True)


def op_cost_create(req: t.CostCreateReq) -> Op[t.CostCreateRes]:
    return _post("/cost/create", req, t.CostCreateRes.model_validate)


def op_cost_query(req: t.CostQueryReq) -> Op[t.CostQueryRes]:
    return _post("/cost/query", req, t.CostQueryRes.model_validate, idempotent=True)


def op_cost_purge(req: t.CostPurgeReq) -> Op[t.Empty]:
    return _post("/cost/purge", req, t.Empty.model_validate, idempotent=True)


def op_feedback_create(req: t.FeedbackCreateReq) -> Op[t.FeedbackCreateRes]:
    return _post("/feedback/create", req, t.FeedbackCreateRes.model_validate)


def op_feedback_batch_create(req: t.FeedbackCreateBatchReq) -> Op[t.FeedbackCreateBatchRes]:
    return _post("/feedback/batch/create", req, t.FeedbackCreateBatchRes.model_validate)


def op_feedback_query(req: t.FeedbackQueryReq) -> Op[t.FeedbackQueryRes]:
    return _post("/feedback/query", req, t.FeedbackQueryRes.model_validate, idempotent=True)


def op_feedback_purge(req: t.FeedbackPurgeReq) -> Op[t.Empty]:
    return _post("/feedback/purge", req, t.Empty.model_validate, idempotent=True)


def op_feedback_replace(req: t.FeedbackReplaceReq) -> Op[t.FeedbackCreateRes]:
    return _post("/feedback/replace", req, t.FeedbackCreateRes.model_validate)


def op_threads_query(req: t.ThreadsQueryReq) -> Op[t.Thread]:
    return _stream("/threads/stream_query", req, t.Thread.model_validate)


def op_completions_create(req: t.CompletionsCreateReq) -> Op[t.CompletionsCreateRes]:
    return _post("/completions/create", req, t.CompletionsCreateRes.model_validate)


def op_completions_create_stream(req: t.CompletionsCreateReq) -> Op[dict[str, Any]]:
    return _stream("/completions/create_stream", req, dict)


def op_otel_export(otlp: Mapping[str, Any], project_id: str | None) -> Op[t.OtelExportRes]:
    """An OTLP JSON ``ExportTraceServiceRequest`` (``{"resourceSpans": [...]}``) to ``/otel/v1/trace``.

    OTLP exporters can also send protobuf straight to ``<trace_url>/otel/v1/traces``.
    """
    payload = {**otlp, "project_id": project_id} if project_id else dict(otlp)
    return Op("POST", "/otel/v1/trace", t.OtelExportRes.model_validate, service="traces", json=payload)


def purge_query(ids: Sequence[str]) -> t.Query:
    """The query ``/feedback/purge`` and ``/cost/purge`` accept: ``id`` equal to one of ``ids``."""
    eqs = [{"$eq": [{"$getField": "id"}, {"$literal": i}]} for i in ids]
    return t.Query.model_validate({"$expr": eqs[0] if len(eqs) == 1 else {"$or": eqs}})


# ----------------------------------------------------------------------------- call trees


@dataclass
class CallNode:
    """A call and its children, in start order."""

    call: t.Call
    children: list[CallNode] = field(default_factory=list)

    def walk(self, depth: int = 0) -> Iterator[tuple[int, t.Call]]:
        """Depth-first ``(depth, call)`` pairs, this call first."""
        yield depth, self.call
        for child in self.children:
            yield from child.walk(depth + 1)


def build_tree(calls: Sequence[t.Call]) -> list[CallNode]:
    """Nest calls by ``parent_id``; calls whose parent is absent are roots."""
    nodes = {c.id: CallNode(c) for c in calls}
    roots: list[CallNode] = []
    for call in sorted(calls, key=lambda c: c.started_at):
        node = nodes[call.id]
        parent = nodes.get(call.parent_id) if call.parent_id else None
        (parent.children if parent is not None else roots).append(node)
    return roots


def _tree_req(project_id: str, trace_id: str) -> t.CallsQueryReq:
    return t.CallsQueryReq(project_id=project_id, filter=t.CallsFilter(trace_ids=[trace_id]))


# ----------------------------------------------------------------------------- resources


class Traces:
    """The trace service at ``trace_url`` (``<base_url>/traces``)."""

    def __init__(self, t: SyncTransport) -> None:
        self._t = t

    def server_info(self) -> t.ServerInfo:
        return self._t.run(op_server_info())

    def health(self) -> t.TraceHealth:
        return self._t.run(op_health())

    def call_start(
        self, req: t.CallStartReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.CallStartRes:
        return self._t.run(op_call_start(request(t.CallStartReq, req, fields)))

    def call_end(self, req: t.CallEndReq | Mapping[str, Any] | None = None, /, **fields: Any) -> t.Empty:
        return self._t.run(op_call_end(request(t.CallEndReq, req, fields)))

    def call_upsert_batch(
        self, req: t.CallCreateBatchReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.CallCreateBatchRes:
        return self._t.run(op_call_upsert_batch(request(t.CallCreateBatchReq, req, fields)))

    def calls_complete(
        self, req: t.CallsCompleteReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.Empty:
        return self._t.run(op_calls_complete(request(t.CallsCompleteReq, req, fields)))

    def call_read(
        self, req: t.CallReadReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.CallReadRes:
        return self._t.run(op_call_read(request(t.CallReadReq, req, fields)))

    def call_update(
        self, req: t.CallUpdateReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.Empty:
        return self._t.run(op_call_update(request(t.CallUpdateReq, req, fields)))

    def calls_delete(
        self, req: t.CallsDeleteReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.CallsDeleteRes:
        return self._t.run(op_calls_delete(request(t.CallsDeleteReq, req, fields)))

    def calls_query(
        self, req: t.CallsQueryReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> Iterator[t.Call]:
        return self._t.stream(op_calls_query(request(t.CallsQueryReq, req, fields)))

    def calls_query_stats(
        self, req: t.CallsQueryStatsReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.CallsQueryStatsRes:
        return self._t.run(op_calls_query_stats(request(t.CallsQueryStatsReq, req, fields)))

    def obj_create(
        self, req: t.ObjCreateReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.ObjCreateRes:
        return self._t.run(op_obj_create(request(t.ObjCreateReq, req, fields)))

    def obj_read(self, req: t.ObjReadReq | Mapping[str, Any] | None = None, /, **fields: Any) -> t.ObjReadRes:
        return self._t.run(op_obj_read(request(t.ObjReadReq, req, fields)))

    def objs_query(
        self, req: t.ObjQueryReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.ObjQueryRes:
        return self._t.run(op_objs_query(request(t.ObjQueryReq, req, fields)))

    def obj_delete(
        self, req: t.ObjDeleteReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.ObjDeleteRes:
        return self._t.run(op_obj_delete(request(t.ObjDeleteReq, req, fields)))

    def table_create(
        self, req: t.TableCreateReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.TableCreateRes:
        return self._t.run(op_table_create(request(t.TableCreateReq, req, fields)))

    def table_update(
        self, req: t.TableUpdateReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.TableUpdateRes:
        return self._t.run(op_table_update(request(t.TableUpdateReq, req, fields)))

    def table_query(
        self, req: t.TableQueryReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.TableQueryRes:
        return self._t.run(op_table_query(request(t.TableQueryReq, req, fields)))

    def table_query_stream(
        self, req: t.TableQueryReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> Iterator[t.TableRow]:
        return self._t.stream(op_table_query_stream(request(t.TableQueryReq, req, fields)))

    def table_query_stats(
        self, req: t.TableQueryStatsReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.TableQueryStatsRes:
        return self._t.run(op_table_query_stats(request(t.TableQueryStatsReq, req, fields)))

    def refs_read_batch(
        self, req: t.RefsReadBatchReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.RefsReadBatchRes:
        return self._t.run(op_refs_read_batch(request(t.RefsReadBatchReq, req, fields)))

    def file_content_read(
        self, req: t.FileContentReadReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> bytes:
        return self._t.run(op_file_content(request(t.FileContentReadReq, req, fields)))

    def cost_create(
        self, req: t.CostCreateReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.CostCreateRes:
        return self._t.run(op_cost_create(request(t.CostCreateReq, req, fields)))

    def cost_query(
        self, req: t.CostQueryReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.CostQueryRes:
        return self._t.run(op_cost_query(request(t.CostQueryReq, req, fields)))

    def cost_purge(self, req: t.CostPurgeReq | Mapping[str, Any] | None = None, /, **fields: Any) -> t.Empty:
        return self._t.run(op_cost_purge(request(t.CostPurgeReq, req, fields)))

    def feedback_create(
        self, req: t.FeedbackCreateReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.FeedbackCreateRes:
        return self._t.run(op_feedback_create(request(t.FeedbackCreateReq, req, fields)))

    def feedback_batch_create(
        self, req: t.FeedbackCreateBatchReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.FeedbackCreateBatchRes:
        return self._t.run(op_feedback_batch_create(request(t.FeedbackCreateBatchReq, req, fields)))

    def feedback_query(
        self, req: t.FeedbackQueryReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.FeedbackQueryRes:
        return self._t.run(op_feedback_query(request(t.FeedbackQueryReq, req, fields)))

    def feedback_purge(
        self, req: t.FeedbackPurgeReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.Empty:
        return self._t.run(op_feedback_purge(request(t.FeedbackPurgeReq, req, fields)))

    def feedback_replace(
        self, req: t.FeedbackReplaceReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.FeedbackCreateRes:
        return self._t.run(op_feedback_replace(request(t.FeedbackReplaceReq, req, fields)))

    def threads_query(
        self, req: t.ThreadsQueryReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> Iterator[t.Thread]:
        return self._t.stream(op_threads_query(request(t.ThreadsQueryReq, req, fields)))

    def completions_create(
        self, req: t.CompletionsCreateReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.CompletionsCreateRes:
        return self._t.run(op_completions_create(request(t.CompletionsCreateReq, req, fields)))

    def completions_create_stream(
        self, req: t.CompletionsCreateReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> Iterator[dict[str, Any]]:
        return self._t.stream(op_completions_create_stream(request(t.CompletionsCreateReq, req, fields)))

    def file_create(self, project_id: str, name: str, content: bytes) -> t.FileCreateRes:
        return self._t.run(op_file_create(project_id, name, content))

    def otel_export(self, otlp: Mapping[str, Any], project_id: str | None = None) -> t.OtelExportRes:
        return self._t.run(op_otel_export(otlp, project_id))

    def call_tree(self, project_id: str, trace_id: str) -> list[CallNode]:
        """The calls of one trace, nested by parent (the roots, usually one)."""
        return build_tree(list(self._t.stream(op_calls_query(_tree_req(project_id, trace_id)))))


class AsyncTraces:
    """The asynchronous twin of :class:`Traces`."""

    def __init__(self, t: AsyncTransport) -> None:
        self._t = t

    async def server_info(self) -> t.ServerInfo:
        return await self._t.run(op_server_info())

    async def health(self) -> t.TraceHealth:
        return await self._t.run(op_health())

    async def call_start(
        self, req: t.CallStartReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.CallStartRes:
        return await self._t.run(op_call_start(request(t.CallStartReq, req, fields)))

    async def call_end(
        self, req: t.CallEndReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.Empty:
        return await self._t.run(op_call_end(request(t.CallEndReq, req, fields)))

    async def call_upsert_batch(
        self, req: t.CallCreateBatchReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.CallCreateBatchRes:
        return await self._t.run(op_call_upsert_batch(request(t.CallCreateBatchReq, req, fields)))

    async def calls_complete(
        self, req: t.CallsCompleteReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.Empty:
        return await self._t.run(op_calls_complete(request(t.CallsCompleteReq, req, fields)))

    async def call_read(
        self, req: t.CallReadReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.CallReadRes:
        return await self._t.run(op_call_read(request(t.CallReadReq, req, fields)))

    async def call_update(
        self, req: t.CallUpdateReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.Empty:
        return await self._t.run(op_call_update(request(t.CallUpdateReq, req, fields)))

    async def calls_delete(
        self, req: t.CallsDeleteReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.CallsDeleteRes:
        return await self._t.run(op_calls_delete(request(t.CallsDeleteReq, req, fields)))

    def calls_query(
        self, req: t.CallsQueryReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> AsyncIterator[t.Call]:
        return self._t.stream(op_calls_query(request(t.CallsQueryReq, req, fields)))

    async def calls_query_stats(
        self, req: t.CallsQueryStatsReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.CallsQueryStatsRes:
        return await self._t.run(op_calls_query_stats(request(t.CallsQueryStatsReq, req, fields)))

    async def obj_create(
        self, req: t.ObjCreateReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.ObjCreateRes:
        return await self._t.run(op_obj_create(request(t.ObjCreateReq, req, fields)))

    async def obj_read(
        self, req: t.ObjReadReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.ObjReadRes:
        return await self._t.run(op_obj_read(request(t.ObjReadReq, req, fields)))

    async def objs_query(
        self, req: t.ObjQueryReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.ObjQueryRes:
        return await self._t.run(op_objs_query(request(t.ObjQueryReq, req, fields)))

    async def obj_delete(
        self, req: t.ObjDeleteReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.ObjDeleteRes:
        return await self._t.run(op_obj_delete(request(t.ObjDeleteReq, req, fields)))

    async def table_create(
        self, req: t.TableCreateReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.TableCreateRes:
        return await self._t.run(op_table_create(request(t.TableCreateReq, req, fields)))

    async def table_update(
        self, req: t.TableUpdateReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.TableUpdateRes:
        return await self._t.run(op_table_update(request(t.TableUpdateReq, req, fields)))

    async def table_query(
        self, req: t.TableQueryReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.TableQueryRes:
        return await self._t.run(op_table_query(request(t.TableQueryReq, req, fields)))

    def table_query_stream(
        self, req: t.TableQueryReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> AsyncIterator[t.TableRow]:
        return self._t.stream(op_table_query_stream(request(t.TableQueryReq, req, fields)))

    async def table_query_stats(
        self, req: t.TableQueryStatsReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.TableQueryStatsRes:
        return await self._t.run(op_table_query_stats(request(t.TableQueryStatsReq, req, fields)))

    async def refs_read_batch(
        self, req: t.RefsReadBatchReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.RefsReadBatchRes:
        return await self._t.run(op_refs_read_batch(request(t.RefsReadBatchReq, req, fields)))

    async def file_content_read(
        self, req: t.FileContentReadReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> bytes:
        return await self._t.run(op_file_content(request(t.FileContentReadReq, req, fields)))

    async def cost_create(
        self, req: t.CostCreateReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.CostCreateRes:
        return await self._t.run(op_cost_create(request(t.CostCreateReq, req, fields)))

    async def cost_query(
        self, req: t.CostQueryReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.CostQueryRes:
        return await self._t.run(op_cost_query(request(t.CostQueryReq, req, fields)))

    async def cost_purge(
        self, req: t.CostPurgeReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.Empty:
        return await self._t.run(op_cost_purge(request(t.CostPurgeReq, req, fields)))

    async def feedback_create(
        self, req: t.FeedbackCreateReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.FeedbackCreateRes:
        return await self._t.run(op_feedback_create(request(t.FeedbackCreateReq, req, fields)))

    async def feedback_batch_create(
        self, req: t.FeedbackCreateBatchReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.FeedbackCreateBatchRes:
        return await self._t.run(op_feedback_batch_create(request(t.FeedbackCreateBatchReq, req, fields)))

    async def feedback_query(
        self, req: t.FeedbackQueryReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.FeedbackQueryRes:
        return await self._t.run(op_feedback_query(request(t.FeedbackQueryReq, req, fields)))

    async def feedback_purge(
        self, req: t.FeedbackPurgeReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.Empty:
        return await self._t.run(op_feedback_purge(request(t.FeedbackPurgeReq, req, fields)))

    async def feedback_replace(
        self, req: t.FeedbackReplaceReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.FeedbackCreateRes:
        return await self._t.run(op_feedback_replace(request(t.FeedbackReplaceReq, req, fields)))

    def threads_query(
        self, req: t.ThreadsQueryReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> AsyncIterator[t.Thread]:
        return self._t.stream(op_threads_query(request(t.ThreadsQueryReq, req, fields)))

    async def completions_create(
        self, req: t.CompletionsCreateReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.CompletionsCreateRes:
        return await self._t.run(op_completions_create(request(t.CompletionsCreateReq, req, fields)))

    def completions_create_stream(
        self, req: t.CompletionsCreateReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> AsyncIterator[dict[str, Any]]:
        return self._t.stream(op_completions_create_stream(request(t.CompletionsCreateReq, req, fields)))

    async def file_create(self, project_id: str, name: str, content: bytes) -> t.FileCreateRes:
        return await self._t.run(op_file_create(project_id, name, content))

    async def otel_export(self, otlp: Mapping[str, Any], project_id: str | None = None) -> t.OtelExportRes:
        return await self._t.run(op_otel_export(otlp, project_id))

    async def call_tree(self, project_id: str, trace_id: str) -> list[CallNode]:
        """The calls of one trace, nested by parent (the roots, usually one)."""
        return build_tree([c async for c in self._t.stream(op_calls_query(_tree_req(project_id, trace_id)))])
