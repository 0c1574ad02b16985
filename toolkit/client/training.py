"""Training API resources: models, checkpoints, trajectory logs, artifacts, RL and SFT jobs.

Each operation is built once as an :class:`Op` by a module function; the sync and async resource
classes are one-line executors over the same builders.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, TypeAdapter

from ..types.common import ListEnvelope
from ..types.training import (
    Artifact,
    Checkpoint,
    DeleteCheckpointsResponse,
    DeleteModelResponse,
    ExperimentalSFTConfig,
    ExperimentalTrainingConfig,
    LogResponse,
    Model,
    SFTTrainingConfig,
    TrainingJob,
    TrainingJobCreated,
    TrainingJobEvent,
    TrajectoryGroup,
)
from ._pagination import AsyncPaginator, CursorPage, PageOp
from ._transport import AsyncTransport, Op, SyncTransport
from .sft_data import SFTData, train_jsonl

if TYPE_CHECKING:
    from .jobs import AsyncTrainingJobHandle, TrainingJobHandle

Order = Literal["asc", "desc"]
GroupLike = TrajectoryGroup | Mapping[str, Any]
_MODELS = TypeAdapter(list[Model])
_ARTIFACTS = TypeAdapter(list[Artifact])
_JOBS = TypeAdapter(list[TrainingJob])


def wire(value: BaseModel | Mapping[str, Any]) -> Any:
    """A wire model or a plain mapping as JSON-ready data (unset defaults omitted, like ART 0.5.23)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_unset=True, by_alias=True)
    return dict(value)


def _groups(groups: Iterable[GroupLike]) -> list[Any]:
    return [wire(TrajectoryGroup.model_validate(g) if not isinstance(g, BaseModel) else g) for g in groups]


# ----------------------------------------------------------------------------- operation builders


def op_create_model(
    project: str, name: str, base_model: str, entity: str | None, return_existing: bool
) -> Op[Model]:
    body = {
        "entity": entity,
        "project": project,
        "name": name,
        "base_model": base_model,
        "return_existing": return_existing,
    }
    return Op("POST", "/v1/preview/models", Model.model_validate, json=body, idempotent=return_existing)


def op_get_model(model_id: str) -> Op[Model]:
    return Op("GET", f"/v1/preview/models/{model_id}", Model.model_validate)


def op_list_models() -> Op[list[Model]]:
    return Op("GET", "/v1/preview/models", _MODELS.validate_python)


def op_delete_model(model_id: str) -> Op[DeleteModelResponse]:
    return Op("DELETE", f"/v1/preview/models/{model_id}", DeleteModelResponse.model_validate)


def op_log(model_id: str, split: str, groups: Iterable[GroupLike]) -> Op[LogResponse]:
    body = {"model_id": model_id, "split": split, "trajectory_groups": _groups(groups)}
    return Op("POST", f"/v1/preview/models/{model_id}/log", LogResponse.model_validate, json=body)


def op_list_trajectories(
    model_id: str, split: str | None, step: int | None, limit: int, offset: int
) -> Op[list[dict[str, Any]]]:
    return Op(
        "GET",
        f"/v1/preview/models/{model_id}/trajectories",
        list,
        params={"split": split, "step": step, "limit": limit, "offset": offset},
    )


def op_checkpoint_page(model_id: str, limit: int | None, order: Order | None) -> PageOp[Checkpoint]:
    def make(after: str | None) -> Op[ListEnvelope[Checkpoint]]:
        return Op(
            "GET",
            f"/v1/preview/models/{model_id}/checkpoints",
            ListEnvelope[Checkpoint].model_validate,
            params={"after": after, "limit": limit, "order": order},
        )

    return make


def op_delete_checkpoints(model_id: str, steps: Sequence[int]) -> Op[DeleteCheckpointsResponse]:
    return Op(
        "DELETE",
        f"/v1/preview/models/{model_id}/checkpoints",
        DeleteCheckpointsResponse.model_validate,
        json={"steps": list(steps)},
    )


def op_create_rl_job(
    model_id: str,
    groups: Iterable[GroupLike],
    experimental_config: ExperimentalTrainingConfig | Mapping[str, Any] | None,
) -> Op[TrainingJobCreated]:
    body = {
        "model_id": model_id,
        "trajectory_groups": _groups(groups),
        "experimental_config": wire(experimental_config) if experimental_config is not None else None,
    }
    return Op("POST", "/v1/preview/training-jobs", TrainingJobCreated.model_validate, json=body)


def op_create_sft_job(
    model_id: str,
    training_data_url: str,
    config: SFTTrainingConfig | Mapping[str, Any] | None,
    experimental_config: ExperimentalSFTConfig | Mapping[str, Any] | None = None,
) -> Op[TrainingJobCreated]:
    body = {
        "model_id": model_id,
        "training_data_url": training_data_url,
        "config": wire(config) if config is not None else None,
    }
    if experimental_config is not None:  # sent only when given, so the body is ART's otherwise
        body["experimental_config"] = wire(experimental_config)
    return Op("POST", "/v1/preview/sft-training-jobs", TrainingJobCreated.model_validate, json=body)


def op_get_job(job_id: str) -> Op[TrainingJob]:
    return Op("GET", f"/v1/preview/training-jobs/{job_id}", TrainingJob.model_validate)


def op_list_jobs(model_id: str | None) -> Op[list[TrainingJob]]:
    return Op("GET", "/v1/preview/training-jobs", _JOBS.validate_python, params={"model_id": model_id})


def op_cancel_job(job_id: str) -> Op[TrainingJob]:
    return Op(
        "POST", f"/v1/preview/training-jobs/{job_id}/cancel", TrainingJob.model_validate, idempotent=True
    )


def op_event_page(job_id: str, limit: int | None) -> PageOp[TrainingJobEvent]:
    def make(after: str | None) -> Op[ListEnvelope[TrainingJobEvent]]:
        return Op(
            "GET",
            f"/v1/preview/training-jobs/{job_id}/events",
            ListEnvelope[TrainingJobEvent].model_validate,
            params={"after": after, "limit": limit},
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
    return Op("POST", "/v1/preview/artifacts", Artifact.model_validate, files=parts, data=form)


def op_list_artifacts() -> Op[list[Artifact]]:
    return Op("GET", "/v1/preview/artifacts", _ARTIFACTS.validate_python)


# ----------------------------------------------------------------------------- sync resources


class Checkpoints:
    def __init__(self, t: SyncTransport) -> None:
        self._t = t

    def list(
        self, model_id: str, *, after: str | None = None, limit: int | None = None, order: Order | None = None
    ) -> CursorPage[Checkpoint]:
        """A page of checkpoints; iterate it to walk all pages."""
        return CursorPage.first(self._t, op_checkpoint_page(model_id, limit, order), after)

    def delete(self, model_id: str, steps: Sequence[int]) -> DeleteCheckpointsResponse:
        return self._t.run(op_delete_checkpoints(model_id, steps))


class Models:
    def __init__(self, t: SyncTransport) -> None:
        self._t = t
        self.checkpoints = Checkpoints(t)

    def create(
        self,
        *,
        project: str,
        name: str,
        base_model: str,
        entity: str | None = None,
        return_existing: bool = True,
    ) -> Model:
        """Register a model (idempotent by default, as ART does, so notebooks can be re-run)."""
        return self._t.run(op_create_model(project, name, base_model, entity, return_existing))

    def retrieve(self, model_id: str) -> Model:
        return self._t.run(op_get_model(model_id))

    def list(self) -> builtins.list[Model]:
        return self._t.run(op_list_models())

    def delete(self, model_id: str) -> DeleteModelResponse:
        return self._t.run(op_delete_model(model_id))

    def log(self, model_id: str, *, split: str, trajectory_groups: Iterable[GroupLike]) -> LogResponse:
        return self._t.run(op_log(model_id, split, trajectory_groups))

    def trajectories(
        self,
        model_id: str,
        *,
        split: str | None = None,
        step: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> builtins.list[dict[str, Any]]:
        return self._t.run(op_list_trajectories(model_id, split, step, limit, offset))


class Events:
    def __init__(self, t: SyncTransport) -> None:
        self._t = t

    def list(
        self, job_id: str, *, after: str | None = None, limit: int | None = None
    ) -> CursorPage[TrainingJobEvent]:
        return CursorPage.first(self._t, op_event_page(job_id, limit), after)


class TrainingJobs:
    def __init__(self, t: SyncTransport) -> None:
        self._t = t
        self.events = Events(t)

    def create(
        self,
        *,
        model_id: str,
        trajectory_groups: Iterable[GroupLike],
        experimental_config: ExperimentalTrainingConfig | Mapping[str, Any] | None = None,
    ) -> TrainingJobHandle:
        """Start an RL step over the groups; the handle follows the job (``wait()``, ``events()``)."""
        created = self._t.run(op_create_rl_job(model_id, trajectory_groups, experimental_config))
        return self.handle(created.id, model_id)

    def handle(self, job_id: str, model_id: str | None = None) -> TrainingJobHandle:
        """A handle of an existing job (RL or SFT)."""
        from .jobs import TrainingJobHandle

        return TrainingJobHandle.bind(job_id, self._t, model_id)

    def list(self, *, model_id: str | None = None) -> builtins.list[TrainingJob]:
        """Extension: the caller's jobs, oldest first."""
        return self._t.run(op_list_jobs(model_id))

    def retrieve(self, job_id: str) -> TrainingJob:
        return self._t.run(op_get_job(job_id))

    def cancel(self, job_id: str) -> TrainingJob:
        return self._t.run(op_cancel_job(job_id))


class SFTTrainingJobs:
    def __init__(self, t: SyncTransport) -> None:
        self._t = t
        self.events = Events(t)

    def create(
        self,
        *,
        model_id: str,
        training_data_url: str,
        config: SFTTrainingConfig | Mapping[str, Any] | None = None,
        experimental_config: ExperimentalSFTConfig | Mapping[str, Any] | None = None,
    ) -> TrainingJobHandle:
        from .jobs import TrainingJobHandle

        created = self._t.run(op_create_sft_job(model_id, training_data_url, config, experimental_config))
        return TrainingJobHandle.bind(created.id, self._t, model_id)

    def create_from_data(
        self,
        *,
        model_id: str,
        data: SFTData,
        config: SFTTrainingConfig | Mapping[str, Any] | None = None,
        name: str | None = None,
    ) -> TrainingJobHandle:
        """Upload ``data`` (trajectories, message lists or a JSONL file) as ``train.jsonl`` to the
        model's project, then start an SFT job on it."""
        model = self._t.run(op_get_model(model_id))
        files = {"train.jsonl": train_jsonl(data)}
        artifact = self._t.run(op_upload_artifact(model.project, files, model.entity, name, model_id))
        return self.create(model_id=model_id, training_data_url=artifact.url, config=config)


class Artifacts:
    def __init__(self, t: SyncTransport) -> None:
        self._t = t

    def upload(
        self,
        *,
        project: str,
        files: Mapping[str, bytes | str | Path],
        entity: str | None = None,
        name: str | None = None,
        model_id: str | None = None,
    ) -> Artifact:
        """Upload ``train.jsonl``, or ``trajectories.jsonl`` + ``metadata.json``; returns the artifact URL."""
        return self._t.run(op_upload_artifact(project, files, entity, name, model_id))

    def list(self) -> builtins.list[Artifact]:
        return self._t.run(op_list_artifacts())


# ----------------------------------------------------------------------------- async resources


class AsyncCheckpoints:
    def __init__(self, t: AsyncTransport) -> None:
        self._t = t

    def list(
        self, model_id: str, *, after: str | None = None, limit: int | None = None, order: Order | None = None
    ) -> AsyncPaginator[Checkpoint]:
        return AsyncPaginator(self._t, op_checkpoint_page(model_id, limit, order), after)

    async def delete(self, model_id: str, steps: Sequence[int]) -> DeleteCheckpointsResponse:
        return await self._t.run(op_delete_checkpoints(model_id, steps))


class AsyncModels:
    def __init__(self, t: AsyncTransport) -> None:
        self._t = t
        self.checkpoints = AsyncCheckpoints(t)

    async def create(
        self,
        *,
        project: str,
        name: str,
        base_model: str,
        entity: str | None = None,
        return_existing: bool = True,
    ) -> Model:
        return await self._t.run(op_create_model(project, name, base_model, entity, return_existing))

    async def retrieve(self, model_id: str) -> Model:
        return await self._t.run(op_get_model(model_id))

    async def list(self) -> builtins.list[Model]:
        return await self._t.run(op_list_models())

    async def delete(self, model_id: str) -> DeleteModelResponse:
        return await self._t.run(op_delete_model(model_id))

    async def log(self, model_id: str, *, split: str, trajectory_groups: Iterable[GroupLike]) -> LogResponse:
        return await self._t.run(op_log(model_id, split, trajectory_groups))

    async def trajectories(
        self,
        model_id: str,
        *,
        split: str | None = None,
        step: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> builtins.list[dict[str, Any]]:
        return await self._t.run(op_list_trajectories(model_id, split, step, limit, offset))


class AsyncEvents:
    def __init__(self, t: AsyncTransport) -> None:
        self._t = t

    def list(
        self, job_id: str, *, after: str | None = None, limit: int | None = None
    ) -> AsyncPaginator[TrainingJobEvent]:
        return AsyncPaginator(self._t, op_event_page(job_id, limit), after)


class AsyncTrainingJobs:
    def __init__(self, t: AsyncTransport) -> None:
        self._t = t
        self.events = AsyncEvents(t)

    async def create(
        self,
        *,
        model_id: str,
        trajectory_groups: Iterable[GroupLike],
        experimental_config: ExperimentalTrainingConfig | Mapping[str, Any] | None = None,
    ) -> AsyncTrainingJobHandle:
        created = await self._t.run(op_create_rl_job(model_id, trajectory_groups, experimental_config))
        return self.handle(created.id, model_id)

    def handle(self, job_id: str, model_id: str | None = None) -> AsyncTrainingJobHandle:
        from .jobs import AsyncTrainingJobHandle

        return AsyncTrainingJobHandle.bind(job_id, self._t, model_id)

    async def list(self, *, model_id: str | None = None) -> builtins.list[TrainingJob]:
        return await self._t.run(op_list_jobs(model_id))

    async def retrieve(self, job_id: str) -> TrainingJob:
        return await self._t.run(op_get_job(job_id))

    async def cancel(self, job_id: str) -> TrainingJob:
        return await self._t.run(op_cancel_job(job_id))


class AsyncSFTTrainingJobs:
    def __init__(self, t: AsyncTransport) -> None:
        self._t = t
        self.events = AsyncEvents(t)

    async def create(
        self,
        *,
        model_id: str,
        training_data_url: str,
        config: SFTTrainingConfig | Mapping[str, Any] | None = None,
        experimental_config: ExperimentalSFTConfig | Mapping[str, Any] | None = None,
    ) -> AsyncTrainingJobHandle:
        from .jobs import AsyncTrainingJobHandle

        created = await self._t.run(
            op_create_sft_job(model_id, training_data_url, config, experimental_config)
        )
        return AsyncTrainingJobHandle.bind(created.id, self._t, model_id)

    async def create_from_data(
        self,
        *,
        model_id: str,
        data: SFTData,
        config: SFTTrainingConfig | Mapping[str, Any] | None = None,
        name: str | None = None,
    ) -> AsyncTrainingJobHandle:
        model = await self._t.run(op_get_model(model_id))
        files = {"train.jsonl": train_jsonl(data)}
        artifact = await self._t.run(op_upload_artifact(model.project, files, model.entity, name, model_id))
        return await self.create(model_id=model_id, training_data_url=artifact.url, config=config)


class AsyncArtifacts:
    def __init__(self, t: AsyncTransport) -> None:
        self._t = t

    async def upload(
        self,
        *,
        project: str,
        files: Mapping[str, bytes | str | Path],
        entity: str | None = None,
        name: str | None = None,
        model_id: str | None = None,
    ) -> Artifact:
        return await self._t.run(op_upload_artifact(project, files, entity, name, model_id))

    async def list(self) -> builtins.list[Artifact]:
        return await self._t.run(op_list_artifacts())
