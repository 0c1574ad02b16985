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

import asyncio
import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ..client import AsyncClient, Client
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


@dataclass
class _Judging:
    """One group's judging written once: the chat request, and the scored copy made from the answer
    (run by :func:`judge_group` on a client, :func:`judge_group_async` on an async one)."""

    group: TrajectoryGroup
    keys: list[str]  # each trajectory's messages, as a key
    distinct: list[str]  # each distinct key once, in order: trajectory id N is distinct[N - 1]

    @classmethod
    def of(cls, group: TrajectoryGroup) -> _Judging:
        keys = [json.dumps(_messages(t), sort_keys=True) for t in group.trajectories]
        return cls(group, keys, list(dict.fromkeys(keys)))

    def request(
        self, model: str | None, rubric: str, max_explanation: int, options: dict[str, Any]
    ) -> dict[str, Any]:
        context, suffixes = split_prefix([json.loads(d) for d in self.distinct])
        answer_schema = {
            "name": "scores",
            "schema": schema(len(self.distinct), max_explanation),
            "strict": True,
        }
        return {
            "model": model,
            "messages": judge_messages(context, suffixes, rubric),
            "response_format": {"type": "json_schema", "json_schema": answer_schema},
            **{"temperature": 0.0, **options},
        }

    def scored(self, content: str | None) -> TrajectoryGroup:
        scores = parse_scores(content, len(self.distinct))
        trajectories = []
        for t, key in zip(self.group.trajectories, self.keys, strict=True):
            score, explanation = scores[self.distinct.index(key)]
            copy = rescored(t, (score, {"ruler_score": score}))
            copy.logs.append(f"judge: {explanation}")
            trajectories.append(copy)
        return self.group.model_copy(update={"trajectories": trajectories}, deep=True)


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
    judging = _Judging.of(group)
    if not judging.keys:
        return group.model_copy(deep=True)
    completion = client.chat.completions.create(**judging.request(model, rubric, max_explanation, options))
    return judging.scored(completion.choices[0].message.content)


async def judge_group_async(
    client: AsyncClient,
    group: TrajectoryGroup,
    *,
    model: str | None = None,
    rubric: str = RUBRIC,
    max_explanation: int = 80,
    **options: Any,
) -> TrajectoryGroup:
    """:func:`judge_group` on an :class:`~toolkit.AsyncClient` (e.g. in ``gather_async`` pipelines)."""
    judging = _Judging.of(group)
    if not judging.keys:
        return group.model_copy(deep=True)
    completion = await client.chat.completions.create(
        **judging.request(model, rubric, max_explanation, options)
    )
    return judging.scored(completion.choices[0].message.content)


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


async def judge_async(
    client: AsyncClient,
    items: GroupSource,
    *,
    model: str | None = None,
    rubric: str = RUBRIC,
    max_concurrency: int = 4,
    **options: Any,
) -> list[TrajectoryGroup]:
    """:func:`judge` on an :class:`~toolkit.AsyncClient`: up to ``max_concurrency`` groups at once."""
    limit = asyncio.Semaphore(max(1, max_concurrency))

    async def one(group: TrajectoryGroup) -> TrajectoryGroup:
        async with limit:
            return await judge_group_async(client, group, model=model, rubric=rubric, **options)

    return list(await asyncio.gather(*(one(g) for g in as_groups(items))))
