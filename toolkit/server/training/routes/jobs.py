"""Training API: RL and SFT jobs, their state and their events (cancel and list are extensions)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from ....types.training import (
    CreateRLTrainingJob,
    CreateSFTTrainingJob,
    TrainingJob,
    TrainingJobCreated,
    TrainingJobEventList,
)
from ...auth import CurrentUser
from ..context import Training
from ..runner import TrainingRunner

router = APIRouter(prefix="/v1/preview")


def runner(training: Training) -> TrainingRunner:
    return training.runner


Runner = Annotated[TrainingRunner, Depends(runner)]


@router.post("/training-jobs", response_model=TrainingJobCreated)
def create_rl_job(
    req: CreateRLTrainingJob,
    run: Runner,
    user: CurrentUser,
) -> TrainingJobCreated:
    """Queue an RL step over the trajectory groups; answers at once with the job id."""
    return TrainingJobCreated(id=run.submit_rl(user, req))


@router.post("/sft-training-jobs", response_model=TrainingJobCreated)
def create_sft_job(
    req: CreateSFTTrainingJob,
    training: Training,
    run: Runner,
    user: CurrentUser,
) -> TrainingJobCreated:
    """Queue an SFT pass over uploaded training data; answers at once with the job id."""
    return TrainingJobCreated(id=run.submit_sft(user, req, training.artifacts))


@router.get("/training-jobs", response_model=list[TrainingJob])
def list_jobs(
    run: Runner,
    user: CurrentUser,
    model_id: str | None = None,
) -> list[TrainingJob]:
    """Extension: the caller's jobs, oldest first, optionally of one model."""
    return run.jobs.all(user, model_id)


@router.get("/training-jobs/{job_id}", response_model=TrainingJob)
def get_job(
    job_id: str,
    run: Runner,
    user: CurrentUser,
) -> TrainingJob:
    return run.jobs.get(user, job_id)


@router.post("/training-jobs/{job_id}/cancel", response_model=TrainingJob)
def cancel_job(
    job_id: str,
    run: Runner,
    user: CurrentUser,
) -> TrainingJob:
    """Extension: cancel a queued job at once, or a running one before its next gradient step."""
    return run.cancel(user, job_id)


@router.get("/training-jobs/{job_id}/events", response_model=TrainingJobEventList)
def list_events(
    job_id: str,
    run: Runner,
    user: CurrentUser,
    after: Annotated[str | None, Query(description="id of the last event of the previous page")] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> TrainingJobEventList:
    items, has_more = run.jobs.event_page(user, job_id, after=after, limit=limit)
    return TrainingJobEventList(
        data=items,
        has_more=has_more,
        first_id=items[0].id if items else None,
        last_id=items[-1].id if items else None,
    )
