"""Tables: content-addressed rows, created, updated, queried (whole or streamed) and counted."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

from ...types import traces as t
from .._transport import Op
from .base import AsyncResource, SyncResource, post, request, stream


def op_table_create(req: t.TableCreateReq) -> Op[t.TableCreateRes]:
    return post("/table/create", req, t.TableCreateRes.model_validate, idempotent=True)


def op_table_update(req: t.TableUpdateReq) -> Op[t.TableUpdateRes]:
    return post("/table/update", req, t.TableUpdateRes.model_validate, idempotent=True)


def op_table_query(req: t.TableQueryReq) -> Op[t.TableQueryRes]:
    return post("/table/query", req, t.TableQueryRes.model_validate, idempotent=True)


def op_table_query_stream(req: t.TableQueryReq) -> Op[t.TableRow]:
    return stream("/table/query_stream", req, t.TableRow.model_validate)


def op_table_query_stats(req: t.TableQueryStatsReq) -> Op[t.TableQueryStatsRes]:
    return post("/table/query_stats", req, t.TableQueryStatsRes.model_validate, idempotent=True)


class Tables(SyncResource):
    def table_create(
        self, req: t.TableCreateReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.TableCreateRes:
        return self._run(op_table_create(request(t.TableCreateReq, req, fields)))

    def table_update(
        self, req: t.TableUpdateReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.TableUpdateRes:
        return self._run(op_table_update(request(t.TableUpdateReq, req, fields)))

    def table_query(
        self, req: t.TableQueryReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.TableQueryRes:
        return self._run(op_table_query(request(t.TableQueryReq, req, fields)))

    def table_query_stream(
        self, req: t.TableQueryReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> Iterator[t.TableRow]:
        return self._stream(op_table_query_stream(request(t.TableQueryReq, req, fields)))

    def table_query_stats(
        self, req: t.TableQueryStatsReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.TableQueryStatsRes:
        return self._run(op_table_query_stats(request(t.TableQueryStatsReq, req, fields)))


class AsyncTables(AsyncResource):
    async def table_create(
        self, req: t.TableCreateReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.TableCreateRes:
        return await self._run(op_table_create(request(t.TableCreateReq, req, fields)))

    async def table_update(
        self, req: t.TableUpdateReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.TableUpdateRes:
        return await self._run(op_table_update(request(t.TableUpdateReq, req, fields)))

    async def table_query(
        self, req: t.TableQueryReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.TableQueryRes:
        return await self._run(op_table_query(request(t.TableQueryReq, req, fields)))

    def table_query_stream(
        self, req: t.TableQueryReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> AsyncIterator[t.TableRow]:
        return self._stream(op_table_query_stream(request(t.TableQueryReq, req, fields)))

    async def table_query_stats(
        self, req: t.TableQueryStatsReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.TableQueryStatsRes:
        return await self._run(op_table_query_stats(request(t.TableQueryStatsReq, req, fields)))
