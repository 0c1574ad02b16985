"""The training API's operations, each described once as an :class:`Op` (method, path, body, parser);
the sync and async resources (:mod:`.training`) and the job handles (:mod:`.jobs`) run them.

Operations marked with an :class:`Extension` are served by the local server only (docs/interfaces.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypedDict
from urllib.parse import quote

from pydantic import BaseModel, TypeAdapter

from ..types.common import ListEnvelope
from ..types.records import CheckpointRecord, CheckpointRecordList
from ..types.training import (
    Artifact,
    Checkpoint,
    CheckpointFiles,
    DeleteCheckpointsResponse,
    DeleteModelResponse,
    ExperimentalSFTConfig,
    ExperimentalTrainingConfig,
    LogResponse,
    LoRAConfig,
    Model,
    SFTTrainingConfig,
    TrainingJob,
    TrainingJobCreated,
    TrainingJobEvent,
    TrajectoryGroup,
)
from ..types.trajectories import StoredTrajectory
from ._pagination import PageOp
from ._transport import Op
from .deployment import Extension

Order = Literal["asc", "desc"]
GroupLike = TrajectoryGroup | Mapping[str, Any]
_MODELS = TypeAdapter(list[Model])
_ARTIFACTS = TypeAdapter(list[Artifact])
_JOBS = TypeAdapter(list[TrainingJob])
_STORED = TypeAdapter(list[StoredTrajectory])

KEEP_MODELS = "keep the Model that models.create returns (with return_existing=True, an existing one)"
MODEL_LISTING = Extension("model listing", KEEP_MODELS)
MODEL_RETRIEVAL = Extension("model retrieval", KEEP_MODELS)
TRAJECTORY_QUERIES = Extension(
    "logged-trajectory queries", "keep the groups you log in the notebook (tk.frames.groups_frame)"
)
_WANDB_ARTIFACT = (
    "log train.jsonl as a W&B Artifact (wandb.Artifact) and pass its wandb-artifact:/// URL to "
    "sft_training_jobs.create(training_data_url=...)"
)
ARTIFACT_UPLOAD = Extension("artifact upload", _WANDB_ARTIFACT)
ARTIFACT_LISTING = Extension("artifact listing", "browse the project's artifacts in W&B")
SFT_FROM_DATA = Extension("SFT from in-memory data (it uploads train.jsonl as an artifact)", _WANDB_ARTIFACT)
JOB_LISTING = Extension("job listing", "keep the handles that training_jobs.create returns")
JOB_CANCEL = Extension("job cancel", "the job runs to its end")
TRAINING_SETTINGS = Extension(
    "choice of LoRA settings or full fine-tuning at model creation",
    "the hosted service trains a LoRA adapter of its own choosing; leave lora_config and full_finetuning out",
)
CHECKPOINT_DOWNLOAD = Extension(
    "checkpoint download",
    "download the checkpoint's W&B artifact of type 'lora': wandb.Api().artifact("
    "'<entity>/<project>/<name>:step<N>', type='lora').download(root=path)",
)
CHECKPOINT_RECORDS = Extension(
    "checkpoint records", "run the experiment under tk.experiment, which keeps each job's request client-side"
)


def wire(value: BaseModel | Mapping[str, Any]) -> Any:
    """A wire model or a plain mapping as JSON-ready data (unset defaults omitted, like ART 0.5.23)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_unset=True, by_alias=True)
    return dict(value)


def _groups(groups: Iterable[GroupLike]) -> list[Any]:
    return [wire(TrajectoryGroup.model_validate(g) if not isinstance(g, BaseModel) else g) for g in groups]


# ----------------------------------------------------------------------------- operation builders


def op_create_model(
    project: str,
    name: str,
    base_model: str,
    entity: str | None,
    return_existing: bool,
    lora_config: LoRAConfig | Mapping[str, Any] | None = None,
    full_finetuning: bool | None = None,
) -> Op[Model]:
    body: dict[str, Any] = {
        "entity": entity,
        "project": project,
        "name": name,
        "base_model": base_model,
        "return_existing": return_existing,
    }
    # the training settings are sent only when given, so the body is ART's otherwise
    if lora_config is not None:
        body["lora_config"] = wire(lora_config)
    if full_finetuning is not None:
        body["full_finetuning"] = full_finetuning
    extension = TRAINING_SETTINGS if lora_config is not None or full_finetuning is not None else None
    return Op(
        "POST",
        "/v1/preview/models",
        Model.model_validate,
        json=body,
        idempotent=return_existing,
        extension=extension,
        link="model",
    )


def op_get_model(model_id: str) -> Op[Model]:
    return Op("GET", f"/v1/preview/models/{model_id}", Model.model_validate, extension=MODEL_RETRIEVAL)


def op_list_models() -> Op[list[Model]]:
    return Op("GET", "/v1/preview/models", _MODELS.validate_python, extension=MODEL_LISTING)


def op_delete_model(model_id: str) -> Op[DeleteModelResponse]:
    return Op("DELETE", f"/v1/preview/models/{model_id}", DeleteModelResponse.model_validate)


def op_log(
    model_id: str, split: str, groups: Iterable[GroupLike], step: int | None = None
) -> Op[LogResponse]:
    body: dict[str, Any] = {"model_id": model_id, "split": split, "trajectory_groups": _groups(groups)}
    if step is not None:  # an extension: the hosted API files groups at the current step
        body["step"] = step
    return Op("POST", f"/v1/preview/models/{model_id}/log", _log_response, json=body)


def _log_response(body: Any) -> LogResponse:
    """The local server's metrics, or a result whose fields are None where the hosted API answers
    an empty body (its documented response schema is ``{}``)."""
    return LogResponse.model_validate(body or {})


class TrajectoryFilters(TypedDict, total=False):
    """Filters of ``client.models.trajectories`` (each narrows the listing; docs/interfaces.md)."""

    split: str
    step: int
    step_min: int
    step_max: int
    reward_min: float
    reward_max: float
    zero_std_only: bool  # groups whose rewards are all equal
    truncated_only: bool  # a turn was cut by max_tokens (finish_reason "length")
    errors_only: bool  # the trajectory or its group recorded an error
    search: str  # text in the message contents or tool calls (case-insensitive for ASCII)
    prompt_key: str  # toolkit.types.prompt_key of the messages before the first assistant turn


def op_trajectory_page(
    model_id: str, filters: TrajectoryFilters, limit: int, offset: int
) -> PageOp[StoredTrajectory]:
    """Stored trajectories, newest step first. The server answers each page as a JSON array; a page
    of ``limit`` items may have more after it (the next one starts after its last id). ``offset``
    skips items of the first page only."""

    def make(after: str | None) -> Op[ListEnvelope[StoredTrajectory]]:
        def parse(body: Any) -> ListEnvelope[StoredTrajectory]:
            items = _STORED.validate_python(body)
            first, last = (str(items[0].id), str(items[-1].id)) if items else (None, None)
            return ListEnvelope(data=items, has_more=len(items) == limit, first_id=first, last_id=last)

        return Op(
            "GET",
            f"/v1/preview/models/{model_id}/trajectories",
            parse,
            params={**filters, "after": after, "limit": limit, "offset": offset if after is None else None},
            extension=TRAJECTORY_QUERIES,
        )

    return make


def op_checkpoint_page(model_id: str, limit: int | None, order: Order | None) -> PageOp[Checkpoint]:
    def make(after: str | None) -> Op[ListEnvelope[Checkpoint]]:
        return Op(
            "GET",
            f"/v1/preview/models/{model_id}/checkpoints",
            ListEnvelope[Checkpoint].model_validate,
            params={"after": after, "limit": limit, "order": order},
        )

    return make


def op_checkpoint_files(model_id: str, step: int) -> Op[CheckpointFiles]:
    return Op(
        "GET",
        f"/v1/preview/models/{model_id}/checkpoints/{step}/files",
        CheckpointFiles.model_validate,
        extension=CHECKPOINT_DOWNLOAD,
    )


def op_checkpoint_file(model_id: str, step: int, name: str) -> Op[bytes]:
    """One file of a checkpoint, streamed as chunks of bytes."""
    return Op(
        "GET",
        f"/v1/preview/models/{model_id}/checkpoints/{step}/files/{quote(name)}",
        bytes,
        stream="bytes",
        extension=CHECKPOINT_DOWNLOAD,
    )


def op_checkpoint_record(model_id: str, step: int) -> Op[CheckpointRecord]:
    return Op(
        "GET",
        f"/v1/preview/models/{model_id}/checkpoints/{step}/record",
        CheckpointRecord.model_validate,
        extension=CHECKPOINT_RECORDS,
    )


def op_records(model_id: str) -> Op[list[CheckpointRecord]]:
    return Op(
        "GET",
        f"/v1/preview/models/{model_id}/records",
        lambda body: CheckpointRecordList.model_validate(body).data,
        extension=CHECKPOINT_RECORDS,
    )


def op_delete_checkpoints(model_id: str, steps: Sequence[int]) -> Op[DeleteCheckpointsResponse]:
    return Op(
        "DELETE",
        f"/v1/preview/models/{model_id}/checkpoints",
        DeleteCheckpointsResponse.model_validate,
        json={"steps": list(steps)},
    )


def _duplicate(allow_duplicate: bool) -> dict[str, Any] | None:
    """The query of a job create: ``allow_duplicate=true`` (an extension: a server without it ignores
    it) only when asked for, so the request is ART's otherwise."""
    return {"allow_duplicate": "true"} if allow_duplicate else None


def op_create_rl_job(
    model_id: str,
    groups: Iterable[GroupLike],
    experimental_config: ExperimentalTrainingConfig | Mapping[str, Any] | None,
    allow_duplicate: bool = False,
) -> Op[TrainingJobCreated]:
    body = {
        "model_id": model_id,
        "trajectory_groups": _groups(groups),
        "experimental_config": wire(experimental_config) if experimental_config is not None else None,
    }
    return Op(
        "POST",
        "/v1/preview/training-jobs",
        TrainingJobCreated.model_validate,
        json=body,
        params=_duplicate(allow_duplicate),
        link="rl_job",
    )


def op_create_sft_job(
    model_id: str,
    training_data_url: str,
    config: SFTTrainingConfig | Mapping[str, Any] | None,
    experimental_config: ExperimentalSFTConfig | Mapping[str, Any] | None = None,
    allow_duplicate: bool = False,
) -> Op[TrainingJobCreated]:
    body = {
        "model_id": model_id,
        "training_data_url": training_data_url,
        "config": wire(config) if config is not None else None,
    }
    if experimental_config is not None:  # sent only when given, so the body is ART's otherwise
        body["experimental_config"] = wire(experimental_config)
    return Op(
        "POST",
        "/v1/preview/sft-training-jobs",
        TrainingJobCreated.model_validate,
        json=body,
        params=_duplicate(allow_duplicate),
        link="sft_job",
    )


def op_get_job(job_id: str) -> Op[TrainingJob]:
    return Op("GET", f"/v1/preview/training-jobs/{job_id}", TrainingJob.model_validate)


def op_job_page(model_id: str | None) -> PageOp[TrainingJob]:
    """The caller's jobs, oldest first. The local server answers the whole listing as one JSON
    array, which is read as a single page (``has_more`` false)."""

    def make(after: str | None) -> Op[ListEnvelope[TrainingJob]]:
        return Op(
            "GET",
            "/v1/preview/training-jobs",
            lambda body: ListEnvelope[TrainingJob](data=_JOBS.validate_python(body)),
            params={"model_id": model_id},
            extension=JOB_LISTING,
        )

    return make


def op_cancel_job(job_id: str) -> Op[TrainingJob]:
    return Op(
        "POST",
        f"/v1/preview/training-jobs/{job_id}/cancel",
        TrainingJob.model_validate,
        idempotent=True,
        extension=JOB_CANCEL,
    )


def op_event_page(job_id: str, limit: int | None, wait: float | None = None) -> PageOp[TrainingJobEvent]:
    """A page of a job's events; ``wait`` (extension): the server holds an empty page up to this many
    seconds until an event arrives (a long poll; other deployments ignore it)."""

    def make(after: str | None) -> Op[ListEnvelope[TrainingJobEvent]]:
        return Op(
            "GET",
            f"/v1/preview/training-jobs/{job_id}/events",
            ListEnvelope[TrainingJobEvent].model_validate,
            params={"after": after, "limit": limit, "wait": wait},
        )

    return make


def op_upload_artifact(
    project: str,
    files: Mapping[str, bytes | str | Path],
    entity: str | None,
    name: str | None,
    model_id: str | None,
) -> Op[Artifact]:
    parts = []
    for filename, content in files.items():
        data = (
            content.read_bytes()
            if isinstance(content, Path)
            else (content.encode() if isinstance(content, str) else content)
        )
        parts.append(("files", (filename, data, "application/octet-stream")))
    form = {
        k: v
        for k, v in {"project": project, "entity": entity, "name": name, "model_id": model_id}.items()
        if v is not None
    }
    return Op(
        "POST",
        "/v1/preview/artifacts",
        Artifact.model_validate,
        files=parts,
        data=form,
        extension=ARTIFACT_UPLOAD,
        link="artifact",
    )


def op_list_artifacts() -> Op[list[Artifact]]:
    return Op("GET", "/v1/preview/artifacts", _ARTIFACTS.validate_python, extension=ARTIFACT_LISTING)
