"""Training API: RL and SFT jobs, their state and their events (cancel and list are extensions)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Annotated

from fastapi import APIRouter, Depends, Query
from starlette.concurrency import run_in_threadpool

from ....types.training import (
    TERMINAL_EVENTS,
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

MAX_WAIT = 30.0  # seconds a long poll of a job's events may be held
# seconds a long poll that found progress events waits for more (or the job's end) before it answers:
# progress goes out in batches, so following a job does not interrupt each of its gradient steps
LINGER = 0.25


def runner(training: Training) -> TrainingRunner:
    return training.runner


Runner = Annotated[TrainingRunner, Depends(runner)]


AllowDuplicate = Annotated[
    bool,
    Query(
        description="Extension: start the job even if one of the same model with this same request is"
        " still queued or running (without it: 409 naming that job)"
    ),
]


@router.post("/training-jobs", response_model=TrainingJobCreated)
def create_rl_job(
    req: CreateRLTrainingJob,
    run: Runner,
    user: CurrentUser,
    allow_duplicate: AllowDuplicate = False,
) -> TrainingJobCreated:
    """Queue an RL step over the trajectory groups; answers at once with the job id."""
    return TrainingJobCreated(id=run.submit_rl(user, req, allow_duplicate=allow_duplicate))


@router.post("/sft-training-jobs", response_model=TrainingJobCreated)
def create_sft_job(
    req: CreateSFTTrainingJob,
    training: Training,
    run: Runner,
    user: CurrentUser,
    allow_duplicate: AllowDuplicate = False,
) -> TrainingJobCreated:
    """Queue an SFT pass over uploaded training data; answers at once with the job id."""
    return TrainingJobCreated(
        id=run.submit_sft(user, req, training.artifacts, allow_duplicate=allow_duplicate)
    )


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
async def list_events(
    job_id: str,
    run: Runner,
    user: CurrentUser,
    after: Annotated[str | None, Query(description="id of the last event of the previous page")] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    wait: Annotated[
        float,
        Query(
            ge=0,
            le=MAX_WAIT,
            description="Extension: a long poll. The answer waits for the job's end, or for"
            f" {LINGER} s after the first new event (progress goes out in batches), or this many"
            " seconds (then possibly an empty page)",
        ),
    ] = 0.0,
) -> TrainingJobEventList:
    deadline = time.monotonic() + wait
    first_seen: float | None = None
    commits = run.jobs.db.commits
    while True:
        with commits.watch() as committed:
            items, has_more = await run_in_threadpool(
                run.jobs.event_page, user, job_id, after=after, limit=limit
            )
            now = time.monotonic()
            if items and first_seen is None:
                first_seen = now
            answer_by = deadline if first_seen is None else min(deadline, first_seen + LINGER)
            ended = has_more or any(e.type in TERMINAL_EVENTS for e in items)
            if ended or now >= answer_by or commits.closed:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(committed.wait(), answer_by - now)
    return TrainingJobEventList(
        data=items,
        has_more=has_more,
        first_id=items[0].id if items else None,
        last_id=items[-1].id if items else None,
    )
