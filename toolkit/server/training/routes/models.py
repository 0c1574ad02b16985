"""Training API: models (create, read, list, delete)."""

from __future__ import annotations

import shutil

from fastapi import APIRouter

from ....types.training import DeleteModelResponse, Model, ModelCreate
from ...auth import CurrentUser
from ...errors import Unprocessable
from ..context import Training

router = APIRouter(prefix="/v1/preview/models")


@router.post("", response_model=Model)
def create_model(
    req: ModelCreate,
    training: Training,
    user: CurrentUser,
) -> Model:
    if req.base_model not in training.base_models:
        raise Unprocessable(
            ["body", "base_model"],
            f"unknown base model {req.base_model!r}; served: {', '.join(training.base_models)}",
        )
    model, _ = training.models.create(user, req)
    return model


@router.get("", response_model=list[Model])
def list_models(
    training: Training,
    user: CurrentUser,
) -> list[Model]:
    """Extension: the caller's models, oldest first."""
    return training.models.all(user)


@router.get("/{model_id}", response_model=Model)
def get_model(
    model_id: str,
    training: Training,
    user: CurrentUser,
) -> Model:
    """Extension: one model with its latest step."""
    return training.models.get(user, model_id)


@router.delete("/{model_id}", response_model=DeleteModelResponse)
def delete_model(
    model_id: str,
    training: Training,
    user: CurrentUser,
) -> DeleteModelResponse:
    checkpoints, artifacts, trajectories, paths = training.models.delete(user, model_id)
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
    return DeleteModelResponse(
        model_id=model_id,
        deleted_checkpoints=checkpoints,
        deleted_run=True,
        deleted_artifacts=artifacts,
        deleted_trajectories=trajectories,
    )
