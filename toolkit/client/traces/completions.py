"""Completions run by the trace service on the chat engine and recorded as calls (whole or streamed)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

from ...types import traces as t
from .._transport import Op
from .base import AsyncResource, SyncResource, post, request, stream


def op_completions_create(req: t.CompletionsCreateReq) -> Op[t.CompletionsCreateRes]:
    return post("/completions/create", req, t.CompletionsCreateRes.model_validate)


def op_completions_create_stream(req: t.CompletionsCreateReq) -> Op[dict[str, Any]]:
    return stream("/completions/create_stream", req, dict)


class Completions(SyncResource):
    def completions_create(
        self, req: t.CompletionsCreateReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.CompletionsCreateRes:
        return self._run(op_completions_create(request(t.CompletionsCreateReq, req, fields)))

    def completions_create_stream(
        self, req: t.CompletionsCreateReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> Iterator[dict[str, Any]]:
        return self._stream(op_completions_create_stream(request(t.CompletionsCreateReq, req, fields)))


class AsyncCompletions(AsyncResource):
    async def completions_create(
        self, req: t.CompletionsCreateReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.CompletionsCreateRes:
        return await self._run(op_completions_create(request(t.CompletionsCreateReq, req, fields)))

    def completions_create_stream(
        self, req: t.CompletionsCreateReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> AsyncIterator[dict[str, Any]]:
        return self._stream(op_completions_create_stream(request(t.CompletionsCreateReq, req, fields)))
