"""Threads: the turn calls of each ``thread_id``, aggregated and streamed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

from ...types import traces as t
from .._transport import Op
from .base import AsyncResource, SyncResource, request, stream


def op_threads_query(req: t.ThreadsQueryReq) -> Op[t.Thread]:
    return stream("/threads/stream_query", req, t.Thread.model_validate)


class Threads(SyncResource):
    def threads_query(
        self, req: t.ThreadsQueryReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> Iterator[t.Thread]:
        return self._stream(op_threads_query(request(t.ThreadsQueryReq, req, fields)))


class AsyncThreads(AsyncResource):
    def threads_query(
        self, req: t.ThreadsQueryReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> AsyncIterator[t.Thread]:
        return self._stream(op_threads_query(request(t.ThreadsQueryReq, req, fields)))
