"""Calls: ingest (start, end, whole calls, batches), reads, updates, deletes, streamed queries, stats,
and call trees (the calls of one trace nested by parent)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...types import traces as t
from .._transport import Op
from .base import AsyncResource, SyncResource, post, request, stream


def op_call_start(req: t.CallStartReq) -> Op[t.CallStartRes]:
    return post("/call/start", req, t.CallStartRes.model_validate, idempotent=True)


def op_call_end(req: t.CallEndReq) -> Op[t.Empty]:
    return post("/call/end", req, t.Empty.model_validate, idempotent=True)


def op_call_upsert_batch(req: t.CallCreateBatchReq) -> Op[t.CallCreateBatchRes]:
    return post("/call/upsert_batch", req, t.CallCreateBatchRes.model_validate, idempotent=True)


def op_calls_complete(req: t.CallsCompleteReq) -> Op[t.Empty]:
    project = req.batch[0].project_id if req.batch else "_/_"
    return post(f"/v2/{project}/calls/complete", req, t.Empty.model_validate, idempotent=True)


def op_call_read(req: t.CallReadReq) -> Op[t.CallReadRes]:
    return post("/call/read", req, t.CallReadRes.model_validate, idempotent=True)


def op_call_update(req: t.CallUpdateReq) -> Op[t.Empty]:
    return post("/call/update", req, t.Empty.model_validate, idempotent=True)


def op_calls_delete(req: t.CallsDeleteReq) -> Op[t.CallsDeleteRes]:
    return post("/calls/delete", req, t.CallsDeleteRes.model_validate)


def op_calls_query(req: t.CallsQueryReq) -> Op[t.Call]:
    return stream("/calls/stream_query", req, t.Call.model_validate)


def op_calls_query_stats(req: t.CallsQueryStatsReq) -> Op[t.CallsQueryStatsRes]:
    return post("/calls/query_stats", req, t.CallsQueryStatsRes.model_validate, idempotent=True)


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


class Calls(SyncResource):
    def call_start(
        self, req: t.CallStartReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.CallStartRes:
        return self._run(op_call_start(request(t.CallStartReq, req, fields)))

    def call_end(self, req: t.CallEndReq | Mapping[str, Any] | None = None, /, **fields: Any) -> t.Empty:
        return self._run(op_call_end(request(t.CallEndReq, req, fields)))

    def call_upsert_batch(
        self, req: t.CallCreateBatchReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.CallCreateBatchRes:
        return self._run(op_call_upsert_batch(request(t.CallCreateBatchReq, req, fields)))

    def calls_complete(
        self, req: t.CallsCompleteReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.Empty:
        return self._run(op_calls_complete(request(t.CallsCompleteReq, req, fields)))

    def call_read(
        self, req: t.CallReadReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.CallReadRes:
        return self._run(op_call_read(request(t.CallReadReq, req, fields)))

    def call_update(
        self, req: t.CallUpdateReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.Empty:
        return self._run(op_call_update(request(t.CallUpdateReq, req, fields)))

    def calls_delete(
        self, req: t.CallsDeleteReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.CallsDeleteRes:
        return self._run(op_calls_delete(request(t.CallsDeleteReq, req, fields)))

    def calls_query(
        self, req: t.CallsQueryReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> Iterator[t.Call]:
        return self._stream(op_calls_query(request(t.CallsQueryReq, req, fields)))

    def calls_query_stats(
        self, req: t.CallsQueryStatsReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.CallsQueryStatsRes:
        return self._run(op_calls_query_stats(request(t.CallsQueryStatsReq, req, fields)))

    def call_tree(self, project_id: str, trace_id: str) -> list[CallNode]:
        """The calls of one trace, nested by parent (the roots, usually one)."""
        return build_tree(list(self._stream(op_calls_query(_tree_req(project_id, trace_id)))))


class AsyncCalls(AsyncResource):
    async def call_start(
        self, req: t.CallStartReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.CallStartRes:
        return await self._run(op_call_start(request(t.CallStartReq, req, fields)))

    async def call_end(
        self, req: t.CallEndReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.Empty:
        return await self._run(op_call_end(request(t.CallEndReq, req, fields)))

    async def call_upsert_batch(
        self, req: t.CallCreateBatchReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.CallCreateBatchRes:
        return await self._run(op_call_upsert_batch(request(t.CallCreateBatchReq, req, fields)))

    async def calls_complete(
        self, req: t.CallsCompleteReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.Empty:
        return await self._run(op_calls_complete(request(t.CallsCompleteReq, req, fields)))

    async def call_read(
        self, req: t.CallReadReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.CallReadRes:
        return await self._run(op_call_read(request(t.CallReadReq, req, fields)))

    async def call_update(
        self, req: t.CallUpdateReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.Empty:
        return await self._run(op_call_update(request(t.CallUpdateReq, req, fields)))

    async def calls_delete(
        self, req: t.CallsDeleteReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.CallsDeleteRes:
        return await self._run(op_calls_delete(request(t.CallsDeleteReq, req, fields)))

    def calls_query(
        self, req: t.CallsQueryReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> AsyncIterator[t.Call]:
        return self._stream(op_calls_query(request(t.CallsQueryReq, req, fields)))

    async def calls_query_stats(
        self, req: t.CallsQueryStatsReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.CallsQueryStatsRes:
        return await self._run(op_calls_query_stats(request(t.CallsQueryStatsReq, req, fields)))

    async def call_tree(self, project_id: str, trace_id: str) -> list[CallNode]:
        """The calls of one trace, nested by parent (the roots, usually one)."""
        return build_tree([c async for c in self._stream(op_calls_query(_tree_req(project_id, trace_id)))])
