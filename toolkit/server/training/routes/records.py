"""Training API: checkpoint records (an extension): what produced each checkpoint of a model."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import APIRouter

from ....types.records import CheckpointRecord, CheckpointRecordList
from ...auth import CurrentUser
from ..context import Training, TrainingContext
from ..records import base_digest, base_revision
from .checkpoints import Step

router = APIRouter(prefix="/v1/preview/models")


def _base(training: TrainingContext) -> Callable[[str], dict[str, str | None]]:
    def facts(base_model: str) -> dict[str, str | None]:
        spec = training.base_models.get(base_model)
        if spec is None:
            return {}
        return {"base_digest": base_digest(spec), "base_revision": base_revision(spec)}

    return facts


@router.get("/{model_id}/checkpoints/{step}/record", response_model=CheckpointRecord)
def checkpoint_record(model_id: str, step: Step, training: Training, user: CurrentUser) -> CheckpointRecord:
    """Extension: the record of one checkpoint (its job, request, data and weight digests, versions,
    device, dtype and thread count)."""
    return training.runner.records.get(user, model_id, step, _base(training))


@router.get("/{model_id}/records", response_model=CheckpointRecordList)
def model_records(model_id: str, training: Training, user: CurrentUser) -> CheckpointRecordList:
    """Extension: the records of every checkpoint of a model, by step."""
    return CheckpointRecordList(data=training.runner.records.all(user, model_id, _base(training)))
