"""Frames of stored trajectories: one row per trajectory, or per message of each."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Union, Unpack, cast

import pandas as pd

from ..types.training import ChatMessage, Choice, as_message
from ..types.trajectories import StoredTrajectory
from ._common import BOOL, FLOAT, INT, STR, as_model, frame
from ._training import trajectory_row

if TYPE_CHECKING:
    from ..client import Client
    from ..client.training_ops import TrajectoryFilters

STORED_COLUMNS = {"id": INT, "model_id": STR, "step": INT, "split": STR, "group": INT, "index": INT}
STORED_COLUMNS |= {"reward": FLOAT, "advantage": FLOAT, "num_messages": INT, "num_turns": INT}
STORED_COLUMNS |= {"prompt_tokens": INT, "completion_tokens": INT, "truncated": BOOL, "error": STR}
STORED_COLUMNS |= {"prompt_key": STR, "last_content": STR, "finish_reason": STR, "trace_call_id": STR}
STORED_COLUMNS |= {"trained_step": INT}
TURN_COLUMNS = {"trajectory_id": INT, "step": INT, "group": INT, "index": INT, "position": INT, "role": STR}
TURN_COLUMNS |= {"content": STR, "tool_calls": STR, "tool_call_id": STR, "finish_reason": STR}
TURN_COLUMNS |= {"num_tokens": INT, "mean_logprob": FLOAT}

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
        yield from (as_model(StoredTrajectory, r) for r in cast(Iterable[Any], source))


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
        row = trajectory_row(item.group_id, item.index, t)
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
