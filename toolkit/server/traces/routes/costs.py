"""Cost routes: create, query, purge token prices."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from ....types import traces as t
from .wire import Store, User_, json_body, ok, sort_pairs

router = APIRouter()


@router.post("/cost/create", response_model=t.CostCreateRes)
def cost_create(
    user: User_, s: Store, req: t.CostCreateReq = Depends(json_body(t.CostCreateReq))
) -> Response:
    return ok({"ids": s.costs.create(user.id, req.project_id, req.costs)})


@router.post("/cost/query", response_model=t.CostQueryRes)
def cost_query(user: User_, s: Store, req: t.CostQueryReq = Depends(json_body(t.CostQueryReq))) -> Response:
    expr = req.query.expr if req.query else None
    results = s.costs.query(
        user.id, req.project_id, req.fields, expr, sort_pairs(req.sort_by), req.limit, req.offset
    )
    return ok({"results": results})


@router.post("/cost/purge", response_model=t.Empty)
def cost_purge(user: User_, s: Store, req: t.CostPurgeReq = Depends(json_body(t.CostPurgeReq))) -> Response:
    s.costs.purge(user.id, req.project_id, req.query.expr)
    return ok({})
