"""Training API: a model's checkpoints (cursor pages, delete)."""

from __future__ import annotations

import shutil
from typing import Annotated, Literal

from fastapi import APIRouter, Body, Query

from ....types.training import CheckpointList, DeleteCheckpointsRequest, DeleteCheckpointsResponse
from ...auth import CurrentUser
from ..context import Training

router = APIRouter(prefix="/v1/preview/models")


@router.get("/{model_id}/checkpoints", response_model=CheckpointList)
def list_checkpoints(
    model_id: str,
    training: Training,
    user: CurrentUser,
    after: Annotated[str | None, Query(description="id of the last checkpoint of the previous page")] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    order: Annotated[Literal["asc", "desc"], Query()] = "asc",
) -> CheckpointList:
    items, has_more = training.models.checkpoint_page(user, model_id, after=after, limit=limit, order=order)
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
    training: Training,
    user: CurrentUser,
) -> DeleteCheckpointsResponse:
    result, paths = training.models.delete_checkpoints(user, model_id, req.steps)
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
    return result
