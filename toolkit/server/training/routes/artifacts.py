"""Upload of SFT training data (the artifact store the SFT job reads from)."""

from __future__ import annotations

import re
import uuid
from typing import Annotated

from fastapi import APIRouter, File, Form, UploadFile

from ....types.training import Artifact
from ...auth import CurrentUser
from ...errors import Unprocessable
from ..context import Training
from ..data import ALLOWED_FILES, TrainingDataError, check_metadata, iter_conversations

router = APIRouter(prefix="/v1/preview/artifacts")
NAME = re.compile(r"^(?!\.+$)[A-Za-z0-9_.\-]{1,128}$")  # "." and ".." are path parts, not names


@router.post("", response_model=Artifact)
async def upload(
    project: Annotated[str, Form()],
    training: Training,
    user: CurrentUser,
    files: Annotated[
        list[UploadFile], File(description="train.jsonl, or trajectories.jsonl + metadata.json")
    ],
    entity: Annotated[str | None, Form()] = None,
    name: Annotated[str | None, Form()] = None,
    model_id: Annotated[str | None, Form()] = None,
) -> Artifact:
    entity = entity or user.name
    name = name or f"sft-data-{uuid.uuid4().hex[:12]}"
    for field, value in (("project", project), ("entity", entity), ("name", name)):
        if not NAME.match(value):
            raise Unprocessable(["body", field], "use 1-128 letters, digits, '_', '.', '-' (not only dots)")
    if model_id is not None:
        training.models.get(user, model_id)
    contents: dict[str, bytes] = {}
    for upload_file in files:
        filename = upload_file.filename or ""
        if filename not in ALLOWED_FILES:
            raise Unprocessable(
                ["body", "files"], f"unexpected file {filename!r}; allowed: {', '.join(ALLOWED_FILES)}"
            )
        if filename in contents:
            raise Unprocessable(["body", "files"], f"{filename} given twice")
        contents[filename] = await upload_file.read()
    data_files = [f for f in contents if f.endswith(".jsonl")]
    if len(data_files) != 1:
        raise Unprocessable(["body", "files"], "send exactly one of train.jsonl or trajectories.jsonl")
    if "trajectories.jsonl" in contents and "metadata.json" not in contents:
        raise Unprocessable(["body", "files"], "trajectories.jsonl needs metadata.json beside it")
    try:
        if "metadata.json" in contents:
            check_metadata(contents["metadata.json"])
        count = sum(1 for _ in iter_conversations(data_files[0], contents[data_files[0]]))
    except TrainingDataError as exc:
        loc: list[str | int] = ["body", exc.filename] + ([exc.line] if exc.line is not None else [])
        raise Unprocessable(loc, exc.message) from None
    if count == 0:
        raise Unprocessable(["body", data_files[0]], "no training examples")
    return training.artifacts.create(
        user, entity=entity, project=project, name=name, files=contents, num_records=count, model_id=model_id
    )


@router.get("", response_model=list[Artifact])
def list_artifacts(
    training: Training,
    user: CurrentUser,
) -> list[Artifact]:
    return training.artifacts.all(user)


@router.get("/{artifact_id}", response_model=Artifact)
def get_artifact(
    artifact_id: str,
    training: Training,
    user: CurrentUser,
) -> Artifact:
    return training.artifacts.get(user, artifact_id)
