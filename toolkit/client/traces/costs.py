"""Costs: token prices per model, created, queried and purged by id."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...types import traces as t
from .._transport import Op
from .base import AsyncResource, SyncResource, post, request


def op_cost_create(req: t.CostCreateReq) -> Op[t.CostCreateRes]:
    return post("/cost/create", req, t.CostCreateRes.model_validate)


def op_cost_query(req: t.CostQueryReq) -> Op[t.CostQueryRes]:
    return post("/cost/query", req, t.CostQueryRes.model_validate, idempotent=True)


def op_cost_purge(req: t.CostPurgeReq) -> Op[t.Empty]:
    return post("/cost/purge", req, t.Empty.model_validate, idempotent=True)


class Costs(SyncResource):
    def cost_create(
        self, req: t.CostCreateReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.CostCreateRes:
        return self._run(op_cost_create(request(t.CostCreateReq, req, fields)))

    def cost_query(
        self, req: t.CostQueryReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.CostQueryRes:
        return self._run(op_cost_query(request(t.CostQueryReq, req, fields)))

    def cost_purge(self, req: t.CostPurgeReq | Mapping[str, Any] | None = None, /, **fields: Any) -> t.Empty:
        return self._run(op_cost_purge(request(t.CostPurgeReq, req, fields)))


class AsyncCosts(AsyncResource):
    async def cost_create(
        self, req: t.CostCreateReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.CostCreateRes:
        return await self._run(op_cost_create(request(t.CostCreateReq, req, fields)))

    async def cost_query(
        self, req: t.CostQueryReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.CostQueryRes:
        return await self._run(op_cost_query(request(t.CostQueryReq, req, fields)))

    async def cost_purge(
        self, req: t.CostPurgeReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.Empty:
        return await self._run(op_cost_purge(request(t.CostPurgeReq, req, fields)))
