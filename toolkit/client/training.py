"""Training API resources: models, checkpoints, trajectory logs, artifacts, RL and SFT jobs.

Each operation is built once in :mod:`.training_ops`; the sync and async resource classes here are
one-line executors over the same builders. Jobs are followed through handles (:mod:`.jobs`).
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Unpack

from ..types.records import CheckpointRecord
from ..types.training import (
    Artifact,
    Checkpoint,
    DeleteCheckpointsResponse,
    DeleteModelResponse,
    ExperimentalSFTConfig,
    ExperimentalTrainingConfig,
    LogResponse,
    LoRAConfig,
    Model,
    SFTTrainingConfig,
    TrainingJob,
    TrainingJobEvent,
)
from ..types.trajectories import StoredTrajectory
from ._pagination import AsyncPaginator, CursorPage
from ._transport import AsyncTransport, SyncTransport
from .jobs import AsyncTrainingJobHandle, TrainingJobHandle, refused_twin, stale, stale_async
from .sft_data import SFTData, train_jsonl
from .training_download import FolderDownload
from .training_ops import (
    SFT_FROM_DATA,
    GroupLike,
    Order,
    TrajectoryFilters,
    op_cancel_job,
    op_checkpoint_file,
    op_checkpoint_files,
    op_checkpoint_page,
    op_checkpoint_record,
    op_create_model,
    op_create_rl_job,
    op_create_sft_job,
    op_delete_checkpoints,
    op_delete_model,
    op_event_page,
    op_get_job,
    op_get_model,
    op_job_page,
    op_list_artifacts,
    op_list_models,
    op_log,
    op_records,
    op_trajectory_page,
    op_upload_artifact,
)

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

    def record(self, model_id: str, step: int) -> CheckpointRecord:
        """Extension: what produced checkpoint ``step`` (job, request, digests, versions, device)."""
        return self._t.run(op_checkpoint_record(model_id, step))

    def download(self, model_id: str, step: int, path: str | Path, *, overwrite: bool = False) -> Path:
        """Extension: write checkpoint ``step`` into the folder ``path`` (a peft adapter folder, or
        whole weights) and return it. ``path`` must not exist or be empty, unless ``overwrite``;
        it is written only once every file has arrived intact."""
        listing = self._t.run(op_checkpoint_files(model_id, step))
        with FolderDownload(Path(path), overwrite) as folder:
            for expected in listing.files:
                with folder.file(expected) as sink:
                    for chunk in self._t.stream(op_checkpoint_file(model_id, step, expected.name)):
                        sink.write(chunk)
            return folder.commit()


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
        lora_config: LoRAConfig | Mapping[str, Any] | None = None,
        full_finetuning: bool | None = None,
    ) -> Model:
        """Register a model (idempotent by default, as ART does, so notebooks can be re-run).

        Extensions: ``lora_config`` (``rank``, ``alpha``, ``dropout``, ``target_modules``,
        ``use_rslora``) sets the LoRA adapter it trains, ``full_finetuning=True`` trains every
        weight instead; left out, the server decides (docs/training.md, "LoRA")."""
        return self._t.run(
            op_create_model(project, name, base_model, entity, return_existing, lora_config, full_finetuning)
        )

    def retrieve(self, model_id: str) -> Model:
        """Extension: a model by id."""
        return self._t.run(op_get_model(model_id))

    def list(self) -> builtins.list[Model]:
        """Extension: the caller's models."""
        return self._t.run(op_list_models())

    def delete(self, model_id: str) -> DeleteModelResponse:
        return self._t.run(op_delete_model(model_id))

    def records(self, model_id: str) -> builtins.list[CheckpointRecord]:
        """Extension: the record of every checkpoint of the model, by step."""
        return self._t.run(op_records(model_id))

    def log(
        self, model_id: str, *, split: str, trajectory_groups: Iterable[GroupLike], step: int | None = None
    ) -> LogResponse:
        """Log groups under ``split`` at the model's current step (``step``: at that checkpoint's, an
        extension); the result's fields are None where the deployment answers no body (the hosted API)."""
        return self._t.run(op_log(model_id, split, trajectory_groups, step))

    def trajectories(
        self,
        model_id: str,
        *,
        limit: int = 100,
        offset: int = 0,
        after: str | None = None,
        **filters: Unpack[TrajectoryFilters],
    ) -> CursorPage[StoredTrajectory]:
        """Extension: stored trajectories (logged, and trained on by RL jobs), newest step first; a
        page of ``limit`` (1-1000) items, iterate it for every matching trajectory. ``after`` is the
        id of the last trajectory of a previous page; ``offset`` skips items of the first page."""
        return CursorPage.first(self._t, op_trajectory_page(model_id, filters, limit, offset), after)


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
        allow_duplicate: bool = False,
    ) -> TrainingJobHandle:
        """Start an RL step over the groups; the handle follows the job (``wait()``, ``events()``).
        Warns (``TrainingJobWarning``) when the groups were sampled from an older checkpoint. Raises
        :class:`DuplicateTrainingJob` naming a job of the model with this same request still queued or
        running (a re-run cell), unless ``allow_duplicate`` (an extension)."""
        op = op_create_rl_job(model_id, trajectory_groups, experimental_config, allow_duplicate)
        told = stale(self._t, model_id, op.json["trajectory_groups"])  # before the job can end
        with refused_twin():
            created = self._t.run(op)
        handle = self.handle(created.id, model_id)
        if told:
            handle.told_stale(told)
        return handle

    def handle(self, job_id: str, model_id: str | None = None) -> TrainingJobHandle:
        """A handle of an existing job (RL or SFT)."""
        return TrainingJobHandle.bind(job_id, self._t, model_id)

    def list(self, *, model_id: str | None = None) -> CursorPage[TrainingJob]:
        """Extension: the caller's jobs, oldest first (a page; iterate it for every job)."""
        return CursorPage.first(self._t, op_job_page(model_id))

    def retrieve(self, job_id: str) -> TrainingJob:
        return self._t.run(op_get_job(job_id))

    def cancel(self, job_id: str) -> TrainingJob:
        """Extension: cancel a queued job, or a running one before its next gradient step."""
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
        allow_duplicate: bool = False,
    ) -> TrainingJobHandle:
        """Start an SFT job on uploaded data; refused as RL's ``create`` is, when a job of the model
        with the same settings on the same data is still queued or running."""
        op = op_create_sft_job(model_id, training_data_url, config, experimental_config, allow_duplicate)
        with refused_twin():
            created = self._t.run(op)
        return TrainingJobHandle.bind(created.id, self._t, model_id)

    def create_from_data(
        self,
        *,
        model_id: str,
        data: SFTData,
        config: SFTTrainingConfig | Mapping[str, Any] | None = None,
        experimental_config: ExperimentalSFTConfig | Mapping[str, Any] | None = None,
        name: str | None = None,
        allow_duplicate: bool = False,
    ) -> TrainingJobHandle:
        """Extension: upload ``data`` (trajectories, message lists or a JSONL file) as
        ``train.jsonl`` to the model's project, then start an SFT job on it (:meth:`create`)."""
        model = self._t.run(replace(op_get_model(model_id), extension=SFT_FROM_DATA))
        files = {"train.jsonl": train_jsonl(data)}
        upload = op_upload_artifact(model.project, files, model.entity, name, model_id)
        artifact = self._t.run(replace(upload, extension=SFT_FROM_DATA))
        return self.create(
            model_id=model_id,
            training_data_url=artifact.url,
            config=config,
            experimental_config=experimental_config,
            allow_duplicate=allow_duplicate,
        )


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
        """Extension: upload ``train.jsonl``, or ``trajectories.jsonl`` + ``metadata.json``; the
        artifact's ``url`` is what ``sft_training_jobs.create(training_data_url=...)`` takes."""
        return self._t.run(op_upload_artifact(project, files, entity, name, model_id))

    def list(self) -> builtins.list[Artifact]:
        """Extension: the caller's artifacts."""
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

    async def record(self, model_id: str, step: int) -> CheckpointRecord:
        return await self._t.run(op_checkpoint_record(model_id, step))

    async def download(self, model_id: str, step: int, path: str | Path, *, overwrite: bool = False) -> Path:
        listing = await self._t.run(op_checkpoint_files(model_id, step))
        with FolderDownload(Path(path), overwrite) as folder:
            for expected in listing.files:
                with folder.file(expected) as sink:
                    async for chunk in self._t.stream(op_checkpoint_file(model_id, step, expected.name)):
                        sink.write(chunk)
            return folder.commit()


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
        lora_config: LoRAConfig | Mapping[str, Any] | None = None,
        full_finetuning: bool | None = None,
    ) -> Model:
        return await self._t.run(
            op_create_model(project, name, base_model, entity, return_existing, lora_config, full_finetuning)
        )

    async def retrieve(self, model_id: str) -> Model:
        return await self._t.run(op_get_model(model_id))

    async def list(self) -> builtins.list[Model]:
        return await self._t.run(op_list_models())

    async def delete(self, model_id: str) -> DeleteModelResponse:
        return await self._t.run(op_delete_model(model_id))

    async def records(self, model_id: str) -> builtins.list[CheckpointRecord]:
        return await self._t.run(op_records(model_id))

    async def log(
        self, model_id: str, *, split: str, trajectory_groups: Iterable[GroupLike], step: int | None = None
    ) -> LogResponse:
        return await self._t.run(op_log(model_id, split, trajectory_groups, step))

    def trajectories(
        self,
        model_id: str,
        *,
        limit: int = 100,
        offset: int = 0,
        after: str | None = None,
        **filters: Unpack[TrajectoryFilters],
    ) -> AsyncPaginator[StoredTrajectory]:
        """Extension: ``await`` it for the first page of stored trajectories, or ``async for`` over
        every matching one (filters as :meth:`Models.trajectories`)."""
        return AsyncPaginator(self._t, op_trajectory_page(model_id, filters, limit, offset), after)


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
        allow_duplicate: bool = False,
    ) -> AsyncTrainingJobHandle:
        op = op_create_rl_job(model_id, trajectory_groups, experimental_config, allow_duplicate)
        told = await stale_async(self._t, model_id, op.json["trajectory_groups"])
        with refused_twin():
            created = await self._t.run(op)
        handle = self.handle(created.id, model_id)
        if told:
            handle.told_stale(told)
        return handle

    def handle(self, job_id: str, model_id: str | None = None) -> AsyncTrainingJobHandle:
        return AsyncTrainingJobHandle.bind(job_id, self._t, model_id)

    def list(self, *, model_id: str | None = None) -> AsyncPaginator[TrainingJob]:
        return AsyncPaginator(self._t, op_job_page(model_id))

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
        allow_duplicate: bool = False,
    ) -> AsyncTrainingJobHandle:
        op = op_create_sft_job(model_id, training_data_url, config, experimental_config, allow_duplicate)
        with refused_twin():
            created = await self._t.run(op)
        return AsyncTrainingJobHandle.bind(created.id, self._t, model_id)

    async def create_from_data(
        self,
        *,
        model_id: str,
        data: SFTData,
        config: SFTTrainingConfig | Mapping[str, Any] | None = None,
        experimental_config: ExperimentalSFTConfig | Mapping[str, Any] | None = None,
        name: str | None = None,
        allow_duplicate: bool = False,
    ) -> AsyncTrainingJobHandle:
        model = await self._t.run(replace(op_get_model(model_id), extension=SFT_FROM_DATA))
        files = {"train.jsonl": train_jsonl(data)}
        upload = op_upload_artifact(model.project, files, model.entity, name, model_id)
        artifact = await self._t.run(replace(upload, extension=SFT_FROM_DATA))
        return await self.create(
            model_id=model_id,
            training_data_url=artifact.url,
            config=config,
            experimental_config=experimental_config,
            allow_duplicate=allow_duplicate,
        )


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
