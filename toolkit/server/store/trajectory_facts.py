"""What the store reads from a trajectory when it keeps it: token counts, whether a turn was cut by
``max_tokens``, its error, prompt key, trace call and searchable text (docs/interfaces.md)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter

from ...types.training import Choice, PydanticException, Trajectory
from ...types.trajectories import prompt_key

METRICS_JSON = TypeAdapter(dict[str, Any])
TRACE_KEYS = ("trace_call_id", "weave_call_id")
ERROR_KEYS = ("error", "exception")


@dataclass(frozen=True)
class TrajectoryFacts:
    data: str  # the trajectory's JSON as stored
    content_hash: str  # sha256 of ``data``: how a job finds the logged row of what it trains on
    prompt_tokens: int | None
    completion_tokens: int | None
    truncated: bool
    error: str | None
    prompt_key: str | None
    trace_call_id: str | None
    search_text: str
    metrics: str  # the trajectory's metrics as JSON (what the /log roll-up reads)


def _sum(counts: list[int | None]) -> int | None:
    """The total, or ``None`` when there is nothing to count or any turn did not say."""
    if not counts or any(c is None for c in counts):
        return None
    return sum(c for c in counts if c is not None)


def _completion_tokens(choice: Choice) -> int | None:
    if choice.token_ids is not None:
        return len(choice.token_ids)
    if choice.logprobs is not None and choice.logprobs.content is not None:
        return len(choice.logprobs.content)
    return None


def group_error(exceptions: list[PydanticException]) -> str | None:
    """The error every trajectory of a group with recorded exceptions carries."""
    if not exceptions:
        return None
    first = exceptions[0]
    return f"{len(exceptions)} rollout(s) of this group raised; first: {first.type}: {first.message}"


def _first_text(values: Mapping[str, object], keys: tuple[str, ...]) -> str | None:
    for key in keys:
        value = values.get(key)
        if value is not None and value != "" and value is not False:
            return str(value)
    return None


def _search_text(t: Trajectory) -> str:
    parts: list[str] = []
    for message in t.messages():
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts += [p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            parts += [str(function.get("name", "")), str(function.get("arguments", ""))]
    return "\n".join(parts)


def trajectory_facts(t: Trajectory, error: str | None = None) -> TrajectoryFacts:
    """The facts of one trajectory; ``error`` is its group's (the trajectory's own metadata
    ``error``/``exception`` wins)."""
    data = t.model_dump_json()
    choices = t.choices()
    return TrajectoryFacts(
        data=data,
        content_hash=hashlib.sha256(data.encode()).hexdigest(),
        prompt_tokens=_sum(
            [len(c.prompt_token_ids) if c.prompt_token_ids is not None else None for c in choices]
        ),
        completion_tokens=_sum([_completion_tokens(c) for c in choices]),
        truncated=any(c.finish_reason == "length" for c in choices),
        error=_first_text(t.metadata, ERROR_KEYS) or error,
        prompt_key=prompt_key(t.messages_and_choices),
        trace_call_id=_first_text(t.metadata, TRACE_KEYS),
        search_text=_search_text(t),
        metrics=METRICS_JSON.dump_json(t.metrics).decode(),  # NaN as null, as in the trajectory's JSON
    )
