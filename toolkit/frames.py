"""pandas frames of jobs, job events, checkpoints, trajectories, chat completions and trace calls.

Each ``*_frame`` function takes typed objects (or their plain dicts) and returns a DataFrame with
typed columns and UTC timestamps; metrics become float columns of their own. Each ``fetch_*``
function reads the same straight from a :class:`~toolkit.Client`, walking every page.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from numbers import Number
from typing import TYPE_CHECKING, Any, TypeVar, Union, Unpack, cast

import numpy as np
import pandas as pd
from pydantic import BaseModel

from ._text import INVISIBLE, escape
from .types.chat import ChatCompletion
from .types.training import (
    ChatMessage,
    Checkpoint,
    Choice,
    TrainingJob,
    TrainingJobEvent,
    Trajectory,
    TrajectoryGroup,
    as_message,
)
from .types.trajectories import StoredTrajectory

if TYPE_CHECKING:
    from .client import Client
    from .client.training_ops import TrajectoryFilters

M = TypeVar("M", bound=BaseModel)
STR: Any = pd.StringDtype()
INT: Any = pd.Int64Dtype()
FLOAT: Any = np.dtype("float64")
TIME: Any = pd.DatetimeTZDtype("ns", "UTC")
BOOL: Any = pd.BooleanDtype()

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
STORED_COLUMNS = {"id": INT, "model_id": STR, "step": INT, "split": STR, "group": INT, "index": INT}
STORED_COLUMNS |= {"reward": FLOAT, "advantage": FLOAT, "num_messages": INT, "num_turns": INT}
STORED_COLUMNS |= {"prompt_tokens": INT, "completion_tokens": INT, "truncated": BOOL, "error": STR}
STORED_COLUMNS |= {"prompt_key": STR, "last_content": STR, "finish_reason": STR, "trace_call_id": STR}
STORED_COLUMNS |= {"trained_step": INT}
TURN_COLUMNS = {"trajectory_id": INT, "step": INT, "group": INT, "index": INT, "position": INT, "role": STR}
TURN_COLUMNS |= {"content": STR, "tool_calls": STR, "tool_call_id": STR, "finish_reason": STR}
TURN_COLUMNS |= {"num_tokens": INT, "mean_logprob": FLOAT}
COMPLETION_COLUMNS = {
    "id": STR,
    "model": STR,
    "created": TIME,
    "choice": INT,
    "finish_reason": STR,
    "content": STR,
    "prompt_tokens": INT,
    "completion_tokens": INT,
    "total_tokens": INT,
    "latency_s": FLOAT,
    "mean_logprob": FLOAT,
}
CALL_COLUMNS = {
    "id": STR,
    "trace_id": STR,
    "parent_id": STR,
    "op_name": STR,
    "name": STR,
    "status": STR,
    "started_at": TIME,
    "ended_at": TIME,
    "latency_ms": FLOAT,
    "prompt_tokens": INT,
    "completion_tokens": INT,
    "total_tokens": INT,
    "cost_usd": FLOAT,
    "exception": STR,
}


def _is_number(value: object) -> bool:
    return isinstance(value, Number) and not isinstance(value, complex)


def _typed(df: pd.DataFrame, columns: Mapping[str, Any]) -> pd.DataFrame:
    """Cast the known columns; extra columns become float when every value is a number, else text.
    Text shows control characters as escapes (``\\x0b``: :func:`toolkit._text.visible`)."""
    for name in df.columns:
        kind = columns.get(name)
        if kind == TIME:
            df[name] = pd.to_datetime(df[name], utc=True, format="ISO8601").astype(TIME)
        elif kind is not None:
            df[name] = df[name].astype(kind)
        elif all(_is_number(v) for v in df[name].dropna()):
            df[name] = df[name].astype(FLOAT)
        else:
            df[name] = df[name].map(lambda v: v if v is None or isinstance(v, str) else json.dumps(v))
            df[name] = df[name].astype(STR)
        if df[name].dtype == STR:
            df[name] = df[name].str.replace(INVISIBLE, escape, regex=True)
    return df


def frame(rows: Sequence[Mapping[str, Any]], columns: Mapping[str, Any]) -> pd.DataFrame:
    """A frame with ``columns`` first (typed, present even when empty) and any extra keys after them."""
    extra = list(dict.fromkeys(k for row in rows for k in row if k not in columns))
    df = pd.DataFrame(list(rows), columns=[*columns, *extra])
    return _typed(df.astype(object).where(df.notna(), None), columns)


def with_values_first(df: pd.DataFrame, leading: Sequence[str] = ()) -> pd.DataFrame:
    """The ``leading`` columns, then the others by how many values they hold (most first, ties in
    their order); columns without a single value are left out."""
    counts = df.notna().sum()
    rest = [c for c in df.columns if c not in leading and counts[c] > 0]
    rest.sort(key=lambda c: -int(counts[c]))
    return df[[c for c in leading if c in df.columns] + rest]


def _as(model: type[M], value: M | Mapping[str, Any]) -> M:
    return value if isinstance(value, model) else model.model_validate(value)


def _prefixed(prefix: str, values: Mapping[str, Any]) -> dict[str, Any]:
    return {f"{prefix}{k}": v for k, v in values.items()}


# ----------------------------------------------------------------------------- training


def flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one level of dotted keys (``lora_config.r``)."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, Mapping):
            out |= flatten(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def events_frame(events: Iterable[TrainingJobEvent | Mapping[str, Any]]) -> pd.DataFrame:
    """One row per job event; ``step`` counts gradient steps; gradient metrics are float columns."""
    rows: list[dict[str, Any]] = []
    step = 0
    for value in events:
        event = _as(TrainingJobEvent, value)
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
        job = _as(TrainingJob, value)
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
        ckpt = _as(Checkpoint, value)
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


def _trajectory_row(group: int, index: int, traj: Trajectory) -> dict[str, Any]:
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
        group = _as(TrajectoryGroup, value)
        rows.extend(_trajectory_row(g, i, t) for i, t in enumerate(group.trajectories))
    return frame(rows, TRAJECTORY_COLUMNS)


# ----------------------------------------------------------------------------- stored trajectories

TrajectorySource = Union["Client", Iterable[StoredTrajectory | Mapping[str, Any]]]


def _stored(
    source: TrajectorySource, model_id: str | None, filters: TrajectoryFilters, page: int
) -> Iterator[StoredTrajectory]:
    """The stored trajectories of a client's model (every page), or the records given."""
    if hasattr(source, "models"):
        if model_id is None:
            raise TypeError("give the model id to read its trajectories from a client")
        yield from source.models.trajectories(model_id, limit=page, **filters)
    else:
        yield from (_as(StoredTrajectory, r) for r in cast(Iterable[Any], source))


def _text(content: Any) -> str | None:
    if content is None or isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if isinstance(p, dict))


def _is_turn(item: ChatMessage | Choice) -> bool:
    return isinstance(item, Choice) or item.role == "assistant"


def trajectories(
    source: TrajectorySource,
    model_id: str | None = None,
    *,
    page: int = 500,
    **filters: Unpack[TrajectoryFilters],
) -> pd.DataFrame:
    """One row per stored trajectory, newest step first: ``tk.frames.trajectories(client, model_id,
    **filters)`` reads every page of ``client.models.trajectories`` (same filters); records it
    returned (or their dicts) work too.

    Columns: ``id``, ``model_id``, ``step``, ``split``, ``group`` (group id), ``index`` (in the
    group), ``reward``, ``advantage`` (what the RL job used; null until one trained on it),
    ``num_messages``, ``num_turns`` (assistant turns), ``prompt_tokens``, ``completion_tokens``
    (of the assistant turns; null when a turn carries no token ids or logprobs), ``truncated`` (a
    turn ended with finish_reason "length"), ``error``, ``prompt_key``, ``last_content``,
    ``finish_reason`` (of the last choice), ``trace_call_id``, ``trained_step`` (the checkpoint an
    RL job made from it), then ``metric/<name>`` and ``meta/<name>`` per trajectory metric and
    metadata key."""
    rows = []
    for item in _stored(source, model_id, filters, page):
        t = item.trajectory
        row = _trajectory_row(item.group_id, item.index, t)
        del row["num_choices"]
        rows.append(
            {
                **row,
                "id": item.id,
                "model_id": item.model_id,
                "step": item.step,
                "split": item.split,
                "advantage": item.advantage,
                "num_turns": sum(_is_turn(m) for m in t.messages_and_choices),
                "prompt_tokens": item.prompt_tokens,
                "completion_tokens": item.completion_tokens,
                "truncated": item.truncated,
                "error": item.error,
                "prompt_key": item.prompt_key,
                "trace_call_id": item.trace_call_id,
                "trained_step": item.trained_step,
            }
        )
    return frame(rows, STORED_COLUMNS)


def _turn(item: ChatMessage | Choice) -> dict[str, Any]:
    message = as_message(item)
    calls = message.get("tool_calls")
    row = {
        "role": message.get("role"),
        "content": _text(message.get("content")),
        "tool_calls": json.dumps(calls) if calls else None,
        "tool_call_id": message.get("tool_call_id"),
    }
    if isinstance(item, Choice):
        logprobs = item.logprobs.content if item.logprobs and item.logprobs.content is not None else None
        count = len(item.token_ids) if item.token_ids is not None else len(logprobs) if logprobs else None
        mean = sum(t.logprob for t in logprobs) / len(logprobs) if logprobs else None
        row |= {"finish_reason": item.finish_reason, "num_tokens": count, "mean_logprob": mean}
    return row


def turns(
    source: TrajectorySource | pd.DataFrame,
    model_id: str | None = None,
    *,
    client: Client | None = None,
    page: int = 500,
    **filters: Unpack[TrajectoryFilters],
) -> pd.DataFrame:
    """One row per message of each stored trajectory, in order: from a client and a model id (with
    the filters of :func:`trajectories`), from stored records, or from a frame of
    :func:`trajectories` together with the ``client`` it was read from.

    Columns: ``trajectory_id``, ``step``, ``group``, ``index``, ``position`` (in the trajectory),
    ``role``, ``content`` (text parts joined), ``tool_calls`` (JSON text), ``tool_call_id``, and
    for the model's turns (choices) ``finish_reason``, ``num_tokens`` (token ids or logprobs) and
    ``mean_logprob``."""
    records: Iterable[StoredTrajectory]
    if isinstance(source, pd.DataFrame):
        if client is None:
            raise TypeError("give the client the trajectories frame was read from (client=...)")
        wanted = set(source["id"].dropna().astype(int))
        records = [
            r
            for m in source["model_id"].dropna().unique()
            for r in _stored(client, str(m), {"step_min": int(source["step"].min())}, page)
            if r.id in wanted and r.step <= int(source["step"].max())
        ]
    else:
        records = _stored(source, model_id, filters, page)
    rows = [
        {
            "trajectory_id": r.id,
            "step": r.step,
            "group": r.group_id,
            "index": r.index,
            "position": p,
            **_turn(m),
        }
        for r in records
        for p, m in enumerate(r.trajectory.messages_and_choices)
    ]
    return frame(rows, TURN_COLUMNS)


# ----------------------------------------------------------------------------- chat


def completions_frame(
    completions: Iterable[ChatCompletion | Mapping[str, Any]], latency_s: Sequence[float] | None = None
) -> pd.DataFrame:
    """One row per choice: model, finish reason, content, usage, latency and mean token logprob.

    ``latency_s`` gives each completion's wall time (the wire body does not carry it).
    """
    rows = []
    for n, value in enumerate(completions):
        completion = _as(ChatCompletion, value)
        usage = completion.usage
        for choice in completion.choices:
            tokens = choice.logprobs.content if choice.logprobs and choice.logprobs.content else []
            rows.append(
                {
                    "id": completion.id,
                    "model": completion.model,
                    "created": pd.Timestamp(completion.created, unit="s", tz="UTC"),
                    "choice": choice.index,
                    "finish_reason": choice.finish_reason,
                    "content": choice.message.content,
                    "prompt_tokens": usage.prompt_tokens,
                    "completion_tokens": usage.completion_tokens,
                    "total_tokens": usage.total_tokens,
                    "latency_s": latency_s[n] if latency_s is not None else None,
                    "mean_logprob": sum(t.logprob for t in tokens) / len(tokens) if tokens else None,
                }
            )
    return frame(rows, COMPLETION_COLUMNS)


def logprobs_frame(completion: ChatCompletion | Mapping[str, Any], choice: int = 0) -> pd.DataFrame:
    """One row per generated token of a choice: position, token, logprob, probability."""
    comp = _as(ChatCompletion, completion)
    logprobs = comp.choices[choice].logprobs
    tokens = logprobs.content if logprobs and logprobs.content else []
    rows = [
        {"position": i, "token": t.token, "logprob": t.logprob, "prob": math.exp(t.logprob)}
        for i, t in enumerate(tokens)
    ]
    return frame(rows, {"position": INT, "token": STR, "logprob": FLOAT, "prob": FLOAT})


# ----------------------------------------------------------------------------- traces


def _call_dict(call: BaseModel | Mapping[str, Any]) -> Mapping[str, Any]:
    return call.model_dump(mode="json") if isinstance(call, BaseModel) else call


def _usage_totals(usage: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    totals = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    for per_model in usage.values():
        totals["prompt_tokens"] += (per_model.get("prompt_tokens") or 0) + (
            per_model.get("input_tokens") or 0
        )
        totals["completion_tokens"] += (per_model.get("completion_tokens") or 0) + (
            per_model.get("output_tokens") or 0
        )
        totals["total_tokens"] += per_model.get("total_tokens") or 0
    return totals


def call_summary(call: BaseModel | Mapping[str, Any]) -> dict[str, Any]:
    """The flat summary of one trace call: name, status, times, latency, token totals and cost."""
    c = _call_dict(call)
    summary = c.get("summary") or {}
    weave = summary.get("weave") or {}
    costs = weave.get("costs") or {}
    cost = sum(
        (v.get("prompt_tokens_total_cost") or 0) + (v.get("completion_tokens_total_cost") or 0)
        for v in costs.values()
    )
    status = weave.get("status") or (
        "error" if c.get("exception") else "success" if c.get("ended_at") else "running"
    )
    name = c.get("display_name") or weave.get("trace_name") or c.get("op_name")
    return {
        "id": c.get("id"),
        "trace_id": c.get("trace_id"),
        "parent_id": c.get("parent_id"),
        "op_name": c.get("op_name"),
        "name": name,
        "status": status,
        "started_at": c.get("started_at"),
        "ended_at": c.get("ended_at"),
        "latency_ms": weave.get("latency_ms"),
        **_usage_totals(summary.get("usage") or {}),
        "cost_usd": cost if costs else None,
        "exception": c.get("exception"),
    }


def calls_frame(calls: Iterable[BaseModel | Mapping[str, Any]]) -> pd.DataFrame:
    """One row per trace call (flattened summary); latency is computed when the server left it out."""
    df = frame([call_summary(c) for c in calls], CALL_COLUMNS)
    missing = df["latency_ms"].isna() & df["ended_at"].notna()
    df.loc[missing, "latency_ms"] = (
        df.loc[missing, "ended_at"] - df.loc[missing, "started_at"]
    ).dt.total_seconds() * 1000
    return df


# ----------------------------------------------------------------------------- straight from a client


def fetch_events(client: Client, job_id: str, page: int = 100) -> pd.DataFrame:
    """Every event of a job (all pages)."""
    return events_frame(client.training_jobs.events.list(job_id, limit=page))


def fetch_jobs(client: Client, job_ids: Iterable[str]) -> pd.DataFrame:
    return jobs_frame(client.training_jobs.retrieve(j) for j in job_ids)


def fetch_checkpoints(client: Client, *model_ids: str, page: int = 100) -> pd.DataFrame:
    """Every checkpoint of each model (all pages of ``page`` items), ``model_id`` telling them apart."""
    frames = [checkpoints_frame(client.models.checkpoints.list(m, limit=page), model_id=m) for m in model_ids]
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
