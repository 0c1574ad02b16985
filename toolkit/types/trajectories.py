"""Stored trajectories: what ``GET /v1/preview/models/{id}/trajectories`` answers (an extension),
and the prompt key that groups the rollouts of one prompt across steps."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from .common import WireModel
from .training import ChatMessage, Choice, Trajectory, as_message

PROMPT_FIELDS = ("role", "content", "name", "tool_calls", "tool_call_id")


def prompt_key(messages: Iterable[Mapping[str, Any] | ChatMessage | Choice]) -> str | None:
    """A stable hash (32 hex digits) of the messages before the first assistant turn: the same
    prompt gives the same key at every step. Only ``role``, ``content``, ``name``, ``tool_calls`` and
    ``tool_call_id`` count; ``None`` when there is no message before the first assistant turn."""
    prompt = []
    for item in messages:
        if isinstance(item, Mapping):
            message = {"role": "assistant"} if "message" in item else item  # a choice as a dict
        else:
            message = as_message(item)
        if message.get("role") == "assistant":
            break
        prompt.append({k: message[k] for k in PROMPT_FIELDS if message.get(k) is not None})
    if not prompt:
        return None
    text = json.dumps(prompt, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class StoredTrajectory(WireModel):
    """One stored trajectory with where it was logged and what training made of it.

    ``advantage`` and ``trained_step`` stay null until an RL job trains on the trajectory; then
    they hold the advantage the job used and the step of the checkpoint it produced.
    """

    id: int
    model_id: str | None = None
    group_id: int
    index: int = 0
    split: str
    step: int
    reward: float
    advantage: float | None = None
    trajectory: Trajectory
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    truncated: bool = False
    error: str | None = None
    prompt_key: str | None = None
    trace_call_id: str | None = None
    trained_step: int | None = None
    job_id: str | None = None
