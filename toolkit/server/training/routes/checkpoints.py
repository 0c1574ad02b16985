"""Training API: a model's checkpoints (cursor pages, delete) and their files (an extension: the
checkpoint's folder, file by file, for download)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from fastapi import APIRouter, Body, Query
from fastapi import Path as PathParam
from fastapi.responses import FileResponse

from ....types.training import (
    CheckpointFiles,
    CheckpointList,
    DeleteCheckpointsRequest,
    DeleteCheckpointsResponse,
)
from ...auth import CurrentUser
from ...errors import NotFound
from .. import lora
from ..checkpoint_files import manifest
from ..context import Training, TrainingContext
from .trajectories import SQLITE_INT_MAX

router = APIRouter(prefix="/v1/preview/models")
Step = Annotated[int, PathParam(ge=0, le=SQLITE_INT_MAX)]


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
        training.runner.files.remove(Path(path))
    gone = set(req.steps) - set(result.not_found_steps) - set(result.kept_steps)
    training.checkpoints_deleted(model_id, sorted(gone))
    return result


def _folder(training: TrainingContext, user: CurrentUser, model_id: str, step: int) -> tuple[str, Path]:
    """(base model, folder) of a checkpoint that has files; 404 naming why otherwise."""
    model = training.models.get(user, model_id)
    row = training.models.checkpoint_at(model_id, step)
    if row is None:
        raise NotFound(f"Model {model_id} has no checkpoint at step {step}")
    if row.path is None:
        raise NotFound(
            f"Checkpoint step {step} of model {model_id} has no files: it is the base model"
            f" {model.base_model} itself (no gradient step has changed it)"
        )
    return model.base_model, Path(row.path)


@router.get("/{model_id}/checkpoints/{step}/files", response_model=CheckpointFiles)
def checkpoint_files(model_id: str, step: Step, training: Training, user: CurrentUser) -> CheckpointFiles:
    """Extension: the files of a checkpoint (a peft adapter folder, or whole weights), with their
    sizes and SHA-256 digests; each is read at ``.../files/{name}``."""
    base_model, folder = _folder(training, user, model_id, step)
    return CheckpointFiles(
        model_id=model_id,
        step=step,
        base_model=base_model,
        format="peft-lora" if lora.is_adapter(folder) else "full",
        files=manifest(folder),
    )


BYTES = {"type": "string", "format": "binary"}


@router.get(
    "/{model_id}/checkpoints/{step}/files/{name}",
    response_class=FileResponse,
    responses={200: {"content": {"application/octet-stream": {"schema": BYTES}}}},
)
def checkpoint_file(
    model_id: str, step: Step, name: str, training: Training, user: CurrentUser
) -> FileResponse:
    """Extension: one file of a checkpoint, as bytes."""
    _, folder = _folder(training, user, model_id, step)
    files = {f.name for f in folder.iterdir() if f.is_file()}
    if name not in files:
        raise NotFound(f"Checkpoint step {step} of model {model_id} has no file {name!r}")
    return FileResponse(folder / name, media_type="application/octet-stream", filename=name)
