"""Frames of training resources: job events, jobs, checkpoints and trajectory groups, and the same
read straight from a client."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..types.training import Checkpoint, Choice, TrainingJob, TrainingJobEvent, Trajectory, TrajectoryGroup
from ._common import BOOL, FLOAT, INT, STR, TIME, as_model, frame

if TYPE_CHECKING:
    from ..client import Client

EVENT_COLUMNS = {"id": STR, "type": STR, "created_at": TIME, "step": INT, "num_sequences": INT}
EVENT_COLUMNS |= {"error_message": STR}
JOB_COLUMNS = {
    "id": STR,
    "model_id": STR,
    "kind": STR,
    "status": STR,
    "created_at": TIME,
    "started_at": TIME,
    "finished_at": TIME,
    "duration_s": FLOAT,
    "base_step": INT,
    "result_step": INT,
    "checkpoint_id": STR,
    "num_sequences": INT,
    "error": STR,
    "queue_position": INT,
}
# ``trained``: false for a step whose job trained nothing (the weights of the step before)
CHECKPOINT_COLUMNS = {"model_id": STR, "id": STR, "step": INT, "trained": BOOL, "created_at": TIME}
TRAJECTORY_COLUMNS = {
    "group": INT,
    "index": INT,
    "reward": FLOAT,
    "num_messages": INT,
    "num_choices": INT,
    "last_content": STR,
    "finish_reason": STR,
}


def _prefixed(prefix: str, values: Mapping[str, Any]) -> dict[str, Any]:
    return {f"{prefix}{k}": v for k, v in values.items()}


def events_frame(events: Iterable[TrainingJobEvent | Mapping[str, Any]]) -> pd.DataFrame:
    """One row per job event; ``step`` counts gradient steps; gradient metrics are float columns."""
    rows: list[dict[str, Any]] = []
    step = 0
    for value in events:
        event = as_model(TrainingJobEvent, value)
        step += event.type == "gradient_step"
        rows.append(
            {
                **event.data,
                "id": event.id,
                "type": event.type,
                "created_at": event.created_at,
                "step": step if event.type == "gradient_step" else None,
            }
        )
    return frame(rows, EVENT_COLUMNS)


def jobs_frame(jobs: Iterable[TrainingJob | Mapping[str, Any]]) -> pd.DataFrame:
    """One row per training job, with its duration in seconds once it started."""
    rows = []
    for value in jobs:
        job = as_model(TrainingJob, value)
        end = job.finished_at
        duration = (end - job.started_at).total_seconds() if end and job.started_at else None
        rows.append({**job.model_dump(exclude_none=False), "duration_s": duration})
    return frame(rows, JOB_COLUMNS)


def checkpoints_frame(
    checkpoints: Iterable[Checkpoint | Mapping[str, Any]], model_id: str | None = None
) -> pd.DataFrame:
    """One row per checkpoint; each metric (``val/reward``, ...) is a float column."""
    rows = []
    for value in checkpoints:
        ckpt = as_model(Checkpoint, value)
        rows.append(
            {
                **ckpt.metrics,
                "model_id": model_id,
                "id": ckpt.id,
                "step": ckpt.step,
                "trained": ckpt.trained,
                "created_at": ckpt.created_at,
            }
        )
    return frame(rows, CHECKPOINT_COLUMNS)


def trajectory_row(group: int, index: int, traj: Trajectory) -> dict[str, Any]:
    messages = traj.messages_and_choices
    choices = traj.choices()
    last = messages[-1] if messages else None
    content = last.message.content if isinstance(last, Choice) else getattr(last, "content", None)
    return {
        **_prefixed("metric/", traj.metrics),
        **_prefixed("meta/", traj.metadata),
        "group": group,
        "index": index,
        "reward": traj.reward,
        "num_messages": len(messages),
        "num_choices": len(choices),
        "last_content": content if isinstance(content, str) else None,
        "finish_reason": choices[-1].finish_reason if choices else None,
    }


def groups_frame(groups: Iterable[TrajectoryGroup | Mapping[str, Any]]) -> pd.DataFrame:
    """One row per trajectory of each group: reward, sizes, last content, ``metric/*`` and ``meta/*``."""
    rows: list[dict[str, Any]] = []
    for g, value in enumerate(groups):
        group = as_model(TrajectoryGroup, value)
        rows.extend(trajectory_row(g, i, t) for i, t in enumerate(group.trajectories))
    return frame(rows, TRAJECTORY_COLUMNS)


def fetch_events(client: Client, job_id: str, page: int = 100) -> pd.DataFrame:
    """Every event of a job (all pages)."""
    return events_frame(client.training_jobs.events.list(job_id, limit=page))


def fetch_jobs(client: Client, job_ids: Iterable[str]) -> pd.DataFrame:
    return jobs_frame(client.training_jobs.retrieve(j) for j in job_ids)


def fetch_checkpoints(client: Client, *model_ids: str, page: int = 100) -> pd.DataFrame:
    """Every checkpoint of each model (all pages of ``page`` items), ``model_id`` telling them apart."""
    frames = [checkpoints_frame(client.models.checkpoints.list(m, limit=page), model_id=m) for m in model_ids]
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
