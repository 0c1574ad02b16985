"""Training API: models, their checkpoints and trajectory logging."""

from __future__ import annotations

import shutil
from typing import Annotated, Literal

from fastapi import APIRouter, Body, Depends, Query

from ...types.training import (
    CheckpointList,
    DeleteCheckpointsRequest,
    DeleteCheckpointsResponse,
    DeleteModelResponse,
    LogRequest,
    LogResponse,
    Model,
    ModelCreate,
)
from ..auth import current_user
from ..errors import Unprocessable
from ..state import Services, services
from ..store.users import User

router = APIRouter(prefix="/v1/preview/models")
SQLITE_INT_MAX = 2**63 - 1  # larger query integers would overflow SQLite's INTEGER (a 500)


@router.post("", response_model=Model)
def create_model(
    req: ModelCreate, svc: Services = Depends(services), user: User = Depends(current_user)
) -> Model:
    if req.base_model not in svc.base_models:
        raise Unprocessable(
            ["body", "base_model"],
            f"unknown base model {req.base_model!r}; served: {', '.join(svc.base_models)}",
        )
    model, _ = svc.models.create(user, req)
    return model


@router.get("", response_model=list[Model])
def list_models(svc: Services = Depends(services), user: User = Depends(current_user)) -> list[Model]:
    """Extension: the caller's models, oldest first."""
    return svc.models.all(user)


@router.get("/{model_id}", response_model=Model)
def get_model(model_id: str, svc: Services = Depends(services), user: User = Depends(current_user)) -> Model:
    """Extension: one model with its latest step."""
    return svc.models.get(user, model_id)


@router.delete("/{model_id}", response_model=DeleteModelResponse)
def delete_model(
    model_id: str, svc: Services = Depends(services), user: User = Depends(current_user)
) -> DeleteModelResponse:
    checkpoints, artifacts, trajectories, paths = svc.models.delete(user, model_id)
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
    return DeleteModelResponse(
        model_id=model_id,
        deleted_checkpoints=checkpoints,
        deleted_run=True,
        deleted_artifacts=artifacts,
        deleted_trajectories=trajectories,
    )


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


@router.post("/{model_id}/log", response_model=LogResponse)
def log_trajectories(
    model_id: str, req: LogRequest, svc: Services = Depends(services), user: User = Depends(current_user)
) -> LogResponse:
    svc.models.get(user, model_id)
    return svc.logs.log(model_id, req)


@router.get("/{model_id}/trajectories")
def list_trajectories(
    model_id: str,
    split: str | None = None,
    step: Annotated[int | None, Query(ge=0, le=SQLITE_INT_MAX)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=SQLITE_INT_MAX)] = 0,
    svc: Services = Depends(services),
    user: User = Depends(current_user),
) -> list[dict[str, object]]:
    """Extension: logged trajectories, newest step first."""
    svc.models.get(user, model_id)
    return svc.logs.query(model_id, split=split, step=step, limit=limit, offset=offset)
