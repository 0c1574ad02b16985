"""Training API: models (create, read, list, delete)."""

from __future__ import annotations

import shutil

from fastapi import APIRouter, Depends

from ....types.training import DeleteModelResponse, Model, ModelCreate
from ...auth import current_user
from ...errors import Unprocessable
from ...state import Services, services
from ...store.users import User

router = APIRouter(prefix="/v1/preview/models")


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
