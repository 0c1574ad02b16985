"""Refs: ``weave:///`` URIs read in one batch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...types import traces as t
from .._transport import Op
from .base import AsyncResource, SyncResource, post, request


def op_refs_read_batch(req: t.RefsReadBatchReq) -> Op[t.RefsReadBatchRes]:
    return post("/refs/read_batch", req, t.RefsReadBatchRes.model_validate, idempotent=True)


class Refs(SyncResource):
    def refs_read_batch(
        self, req: t.RefsReadBatchReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.RefsReadBatchRes:
        return self._run(op_refs_read_batch(request(t.RefsReadBatchReq, req, fields)))


class AsyncRefs(AsyncResource):
    async def refs_read_batch(
        self, req: t.RefsReadBatchReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.RefsReadBatchRes:
        return await self._run(op_refs_read_batch(request(t.RefsReadBatchReq, req, fields)))
