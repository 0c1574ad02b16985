"""Training API: models (create, read, list, delete)."""

from __future__ import annotations

import shutil

from fastapi import APIRouter

from ....types.training import DeleteModelResponse, Model, ModelCreate
from ...auth import CurrentUser
from ...chat.model_names import served_names
from ...engine.model import serve_hint
from ...errors import Unprocessable
from .. import lora
from ..context import Training

router = APIRouter(prefix="/v1/preview/models")


@router.post("", response_model=Model)
def create_model(
    req: ModelCreate,
    training: Training,
    user: CurrentUser,
) -> Model:
    spec = training.base_models.get(req.base_model)
    if spec is None:
        hint = serve_hint(req.base_model)
        raise Unprocessable(
            ["body", "base_model"],
            f"unknown base model {req.base_model!r}; {served_names(training.base_models)}"
            + (f"; {hint}" if hint else ""),
        )
    settings = lora.settings_for(req)
    unknown = lora.unknown_targets(settings, spec.folder) if settings else []
    if unknown:
        raise Unprocessable(
            ["body", "lora_config", "target_modules"],
            f"{', '.join(unknown)}: no such linear layer in {req.base_model}; its layers end in"
            f" {', '.join(lora.suffixes(spec.folder))}",
        )
    model, _ = training.models.create(user, req, settings)
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
    training.runner.files.remove_model(model_id)
    training.checkpoints_deleted(model_id, None)
    for path in paths:  # the uploaded artifacts' folders (checkpoints live under the model's folder)
        shutil.rmtree(path, ignore_errors=True)
    return DeleteModelResponse(
        model_id=model_id,
        deleted_checkpoints=checkpoints,
        deleted_run=True,
        deleted_artifacts=artifacts,
        deleted_trajectories=trajectories,
    )
