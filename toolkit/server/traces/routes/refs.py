"""Ref routes: read a batch of ``weave:///`` refs."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from ....types import traces as t
from .wire import Store, User_, json_body, ok

router = APIRouter()


@router.post("/refs/read_batch", response_model=t.RefsReadBatchRes)
def refs_read_batch(
    user: User_, s: Store, req: t.RefsReadBatchReq = Depends(json_body(t.RefsReadBatchReq))
) -> Response:
    return ok({"vals": s.refs.read(user.id, req.refs)})
