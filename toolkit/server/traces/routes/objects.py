"""Object routes: create, read, query, delete."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from ....types import traces as t
from .wire import Store, User_, json_body, ok, sort_pairs

router = APIRouter()


@router.post("/obj/create", response_model=t.ObjCreateRes)
def obj_create(user: User_, s: Store, req: t.ObjCreateReq = Depends(json_body(t.ObjCreateReq))) -> Response:
    return ok({"digest": s.objects.create(user.id, req.obj), "object_id": req.obj.object_id})


@router.post("/obj/read", response_model=t.ObjReadRes)
def obj_read(user: User_, s: Store, req: t.ObjReadReq = Depends(json_body(t.ObjReadReq))) -> Response:
    obj = s.objects.read(
        user.id, req.project_id, req.object_id, req.digest, req.metadata_only, req.include_tags_and_aliases
    )
    return ok({"obj": obj})


@router.post("/objs/query", response_model=t.ObjQueryRes)
def objs_query(user: User_, s: Store, req: t.ObjQueryReq = Depends(json_body(t.ObjQueryReq))) -> Response:
    objs = s.objects.query(
        user.id,
        req.project_id,
        req.filter,
        req.limit,
        req.offset,
        sort_pairs(req.sort_by),
        req.metadata_only,
        req.include_tags_and_aliases,
    )
    return ok({"objs": objs})


@router.post("/obj/delete", response_model=t.ObjDeleteRes)
def obj_delete(user: User_, s: Store, req: t.ObjDeleteReq = Depends(json_body(t.ObjDeleteReq))) -> Response:
    deleted = s.objects.delete(user.id, req.project_id, req.object_id, req.digests)
    return ok({"num_deleted": len(deleted), "deleted_versions": deleted})
