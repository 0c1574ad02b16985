"""Re-score trajectories with a new reward, on copies: the originals (and the server's) stay as they were.

As RULER does, a re-scored trajectory keeps its old reward in ``metrics["independent_reward"]`` (the
first re-scoring sets it; later ones keep it) and carries the new one as ``reward``.
:func:`comparison` lays old and new side by side; :func:`toolkit.research.figures.rescore` plots it.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import pandas as pd

from ..types.training import Trajectory, TrajectoryGroup
from .records import GroupSource, as_groups

OLD = "independent_reward"
Score = float | tuple[float, Mapping[str, float | int | bool]]
RewardFn = Callable[[Trajectory], Score | Awaitable[Score]]


def rescored(trajectory: Trajectory, score: Score) -> Trajectory:
    """A copy of ``trajectory`` with the new reward (and metrics, when the score has them)."""
    reward, metrics = (score, {}) if isinstance(score, int | float) else score
    copy = trajectory.model_copy(deep=True)
    copy.metrics.setdefault(OLD, trajectory.reward)
    copy.metrics.update(metrics)
    copy.reward = float(reward)
    return copy


def rescore(items: GroupSource, reward: RewardFn) -> list[TrajectoryGroup]:
    """New groups scored by ``reward(trajectory)`` (a float, or ``(float, metrics)``); for an async
    reward use :func:`rescore_async`."""
    groups = as_groups(items)
    out = []
    for group in groups:
        trajectories = []
        for t in group.trajectories:
            score = reward(t.model_copy(deep=True))
            if inspect.isawaitable(score):
                if inspect.iscoroutine(score):
                    score.close()
                raise TypeError("the reward function is async: use rescore_async")
            trajectories.append(rescored(t, score))
        out.append(group.model_copy(update={"trajectories": trajectories}, deep=True))
    return out


async def rescore_async(items: GroupSource, reward: RewardFn) -> list[TrajectoryGroup]:
    """:func:`rescore` for a reward that may be async (each group's trajectories scored concurrently)."""
    groups = as_groups(items)

    async def one(t: Trajectory) -> Trajectory:
        score = reward(t.model_copy(deep=True))
        return rescored(t, await score if inspect.isawaitable(score) else score)

    scored = [await asyncio.gather(*(one(t) for t in g.trajectories)) for g in groups]
    return [
        g.model_copy(update={"trajectories": list(s)}, deep=True) for g, s in zip(groups, scored, strict=True)
    ]


def comparison(groups: GroupSource, threshold: float = 0.5) -> pd.DataFrame:
    """One row per re-scored trajectory: ``group``, ``index``, ``old_reward``, ``new_reward``,
    ``delta`` (new - old) and ``disagree`` (``|delta| >= threshold``: reward-hacking candidates)."""
    rows: list[dict[str, Any]] = []
    for g, group in enumerate(as_groups(groups)):
        for i, t in enumerate(group.trajectories):
            old = float(t.metrics.get(OLD, t.reward))
            rows.append(
                {"group": g, "index": i, "old_reward": old, "new_reward": t.reward, "delta": t.reward - old}
            )
    frame = pd.DataFrame(rows, columns=["group", "index", "old_reward", "new_reward", "delta"])
    frame["disagree"] = frame["delta"].abs() >= threshold
    return frame
