"""Training API: a model's checkpoints (cursor pages, delete)."""

from __future__ import annotations

import shutil
from typing import Annotated, Literal

from fastapi import APIRouter, Body, Depends, Query

from ....types.training import CheckpointList, DeleteCheckpointsRequest, DeleteCheckpointsResponse
from ...auth import current_user
from ...state import Services, services
from ...store.users import User

router = APIRouter(prefix="/v1/preview/models")


@router.get("/{model_id}/checkpoints", response_model=CheckpointList)
def list_checkpoints(
    model_id: str,
    after: Annotated[str | None, Query(description="id of the last checkpoint of the previous page")] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    order: Annotated[Literal["asc", "desc"], Query()] = "asc",
    svc: Services = Depends(services),
    user: User = Depends(current_user),
) -> CheckpointList:
    items, has_more = svc.models.checkpoint_page(user, model_id, after=after, limit=limit, order=order)
    return CheckpointList(
        data=items,
        has_more=has_more,
        first_id=items[0].id if items else None,
        last_id=items[-1].id if items else None,
    )


@router.delete("/{model_id}/checkpoints", response_model=DeleteCheckpointsResponse)
def delete_checkpoints(
    model_id: str,
    req: Annotated[DeleteCheckpointsRequest, Body()],
    svc: Services = Depends(services),
    user: User = Depends(current_user),
) -> DeleteCheckpointsResponse:
    result, paths = svc.models.delete_checkpoints(user, model_id, req.steps)
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
    return result
