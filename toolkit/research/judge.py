"""An LLM judge that scores a group's trajectories against each other, shaped as ART's RULER.

The messages every trajectory of the group shares are sent once in ``<context>``; each distinct
remainder goes in its own ``<trajectory id="N">`` (identical trajectories are judged once and share
the score). The judge answers through the chat endpoint with structured output (``response_format``
``json_schema``): one object keyed by trajectory id, each ``{"explanation", "score"}``, ``score``
one of 0, 0.05, ..., 1 (an ``enum``, since constrained decoders ignore ``minimum``/``maximum``).
An answer that is not that JSON, or scores other trajectories than those sent, is a
:class:`JudgeError`. The new groups carry the score as ``reward`` and in ``metrics["ruler_score"]``,
the old reward in ``metrics["independent_reward"]`` and the explanation in ``logs``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..client import Client
from ..types.training import Trajectory, TrajectoryGroup
from .records import GroupSource, as_groups
from .rescore import rescored
from .rows import message

SCORES = [round(i * 0.05, 2) for i in range(21)]
RUBRIC = """\
- A trajectory that reaches the goal scores well above one that does not.
- Between two that reach it, the more efficient one scores higher.
- Score gaps follow how different the trajectories' quality is; partial credit is fine."""
SYSTEM = """\
You judge trajectories of an AI agent. All of them pursued the same goal, given in <context>; \
score each against the others, from 0 to 1, following the rubric.

Rubric:
{rubric}

Answer in JSON: for each trajectory id, a short explanation and its score."""


class JudgeError(ValueError):
    """The judge's answer cannot be read as one score per trajectory."""


def _messages(trajectory: Trajectory) -> list[dict[str, Any]]:
    return [message(m, False) for m in trajectory.messages_and_choices]


def split_prefix(
    message_lists: Sequence[list[dict[str, Any]]],
) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]]]:
    """The longest message prefix shared by every list, and each list's remainder."""
    shortest = min(len(m) for m in message_lists)
    n = 0
    while n < shortest and all(m[n] == message_lists[0][n] for m in message_lists):
        n += 1
    return message_lists[0][:n], [m[n:] for m in message_lists]


def judge_messages(
    context: list[dict[str, Any]], suffixes: Sequence[list[dict[str, Any]]], rubric: str
) -> list[dict[str, Any]]:
    """The judge's conversation: the rubric, then the shared context and each numbered remainder."""
    parts = [f"<context>\n{json.dumps(context)}\n</context>"]
    parts += [f'<trajectory id="{i}">\n{json.dumps(s)}\n</trajectory>' for i, s in enumerate(suffixes, 1)]
    return [
        {"role": "system", "content": SYSTEM.format(rubric=rubric)},
        {"role": "user", "content": "\n".join(parts)},
    ]


def schema(n: int, max_explanation: int) -> dict[str, Any]:
    """A JSON schema of ``n`` scores keyed ``"1"``..``"n"``, every key required."""
    entry = {
        "type": "object",
        "properties": {
            "explanation": {"type": "string", "maxLength": max_explanation},
            "score": {"enum": SCORES},
        },
        "required": ["explanation", "score"],
        "additionalProperties": False,
    }
    ids = [str(i) for i in range(1, n + 1)]
    return {
        "type": "object",
        "properties": dict.fromkeys(ids, entry),
        "required": ids,
        "additionalProperties": False,
    }


def parse_scores(text: str | None, n: int) -> list[tuple[float, str]]:
    """``(score, explanation)`` of trajectories 1..n from the judge's answer, or a :class:`JudgeError`."""
    try:
        data = json.loads(text or "")
    except json.JSONDecodeError as exc:
        raise JudgeError(f"the judge's answer is not JSON: {text!r}") from exc
    ids = [str(i) for i in range(1, n + 1)]
    if not isinstance(data, dict) or sorted(data) != sorted(ids):
        got = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise JudgeError(f"the judge scored {got}, expected the {n} trajectories {ids}")
    out = []
    for i in ids:
        entry = data[i]
        score = entry.get("score") if isinstance(entry, dict) else None
        if isinstance(score, bool) or not isinstance(score, int | float) or not 0 <= score <= 1:
            raise JudgeError(f"trajectory {i}: the score must be a number from 0 to 1, got {score!r}")
        out.append((float(score), str(entry.get("explanation", ""))))
    return out


def judge_group(
    client: Client,
    group: TrajectoryGroup,
    *,
    model: str | None = None,
    rubric: str = RUBRIC,
    max_explanation: int = 80,
    **options: Any,
) -> TrajectoryGroup:
    """A re-scored copy of ``group``, judged by ``model`` (any name the chat endpoint serves)."""
    lists = [_messages(t) for t in group.trajectories]
    if not lists:
        return group.model_copy(deep=True)
    distinct = list(dict.fromkeys(json.dumps(m, sort_keys=True) for m in lists))
    context, suffixes = split_prefix([json.loads(d) for d in distinct])
    completion = client.chat.completions.create(
        model=model,
        messages=judge_messages(context, suffixes, rubric),
        response_format={
            "type": "json_schema",
            "json_schema": {
                "name": "scores",
                "schema": schema(len(distinct), max_explanation),
                "strict": True,
            },
        },
        **{"temperature": 0.0, **options},
    )
    scores = parse_scores(completion.choices[0].message.content, len(distinct))
    trajectories = []
    for t, key in zip(group.trajectories, (json.dumps(m, sort_keys=True) for m in lists), strict=True):
        score, explanation = scores[distinct.index(key)]
        copy = rescored(t, (score, {"ruler_score": score}))
        copy.logs.append(f"judge: {explanation}")
        trajectories.append(copy)
    return group.model_copy(update={"trajectories": trajectories}, deep=True)


def judge(
    client: Client,
    items: GroupSource,
    *,
    model: str | None = None,
    rubric: str = RUBRIC,
    max_concurrency: int = 4,
    **options: Any,
) -> list[TrajectoryGroup]:
    """:func:`judge_group` over every group (up to ``max_concurrency`` at once); the originals and
    whatever the server stored stay unchanged."""
    groups = as_groups(items)
    with ThreadPoolExecutor(max_workers=max(1, max_concurrency)) as pool:
        return list(pool.map(lambda g: judge_group(client, g, model=model, rubric=rubric, **options), groups))
