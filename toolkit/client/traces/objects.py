"""Objects: versioned values (saved ops included), created, read by digest or ``latest``, queried, deleted."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...types import traces as t
from .._transport import Op
from .base import AsyncResource, SyncResource, post, request


def op_obj_create(req: t.ObjCreateReq) -> Op[t.ObjCreateRes]:
    return post("/obj/create", req, t.ObjCreateRes.model_validate, idempotent=True)


def op_obj_read(req: t.ObjReadReq) -> Op[t.ObjReadRes]:
    return post("/obj/read", req, t.ObjReadRes.model_validate, idempotent=True)


def op_objs_query(req: t.ObjQueryReq) -> Op[t.ObjQueryRes]:
    return post("/objs/query", req, t.ObjQueryRes.model_validate, idempotent=True)


def op_obj_delete(req: t.ObjDeleteReq) -> Op[t.ObjDeleteRes]:
    return post("/obj/delete", req, t.ObjDeleteRes.model_validate)


class Objects(SyncResource):
    def obj_create(
        self, req: t.ObjCreateReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.ObjCreateRes:
        return self._run(op_obj_create(request(t.ObjCreateReq, req, fields)))

    def obj_read(self, req: t.ObjReadReq | Mapping[str, Any] | None = None, /, **fields: Any) -> t.ObjReadRes:
        return self._run(op_obj_read(request(t.ObjReadReq, req, fields)))

    def objs_query(
        self, req: t.ObjQueryReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.ObjQueryRes:
        return self._run(op_objs_query(request(t.ObjQueryReq, req, fields)))

    def obj_delete(
        self, req: t.ObjDeleteReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.ObjDeleteRes:
        return self._run(op_obj_delete(request(t.ObjDeleteReq, req, fields)))


class AsyncObjects(AsyncResource):
    async def obj_create(
        self, req: t.ObjCreateReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.ObjCreateRes:
        return await self._run(op_obj_create(request(t.ObjCreateReq, req, fields)))

    async def obj_read(
        self, req: t.ObjReadReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.ObjReadRes:
        return await self._run(op_obj_read(request(t.ObjReadReq, req, fields)))

    async def objs_query(
        self, req: t.ObjQueryReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.ObjQueryRes:
        return await self._run(op_objs_query(request(t.ObjQueryReq, req, fields)))

    async def obj_delete(
        self, req: t.ObjDeleteReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.ObjDeleteRes:
        return await self._run(op_obj_delete(request(t.ObjDeleteReq, req, fields)))
