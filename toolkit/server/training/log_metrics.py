"""The metrics ART computes when trajectories are logged, prefixed by split (``val/reward``, ...)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..store.logs import LoggedGroup
from . import stats


@dataclass
class GroupSummary:
    """What the metrics need of one trajectory group."""

    rewards: list[float]
    trajectory_metrics: list[dict[str, float]]
    group_metrics: dict[str, float] = field(default_factory=dict)
    num_exceptions: int = 0


def _numeric(values: dict[str, object]) -> dict[str, float]:
    """The values that are finite numbers (booleans count as 0/1): NaN and infinities are left out."""
    return {k: float(v) for k, v in values.items() if isinstance(v, int | float) and math.isfinite(v)}


def summarise(
    rewards: Sequence[float],
    metrics: Iterable[dict[str, object]],
    group_metrics: dict[str, object],
    num_exceptions: int,
) -> GroupSummary:
    return GroupSummary(
        list(rewards), [_numeric(m) for m in metrics], _numeric(group_metrics), num_exceptions
    )


def _means(rows: Iterable[dict[str, float]]) -> dict[str, float | None]:
    columns: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        for key, value in row.items():
            columns[key].append(value)
    return {key: stats.mean(values) for key, values in columns.items()}


def log_metrics(split: str, groups: Sequence[GroupSummary]) -> dict[str, float]:
    """``{split}/reward`` (mean), ``reward_std_dev`` (mean population std over groups of 2+),
    ``exception_rate``, means of custom trajectory metrics, ``group/<key>`` means of group metrics,
    and counts. No statistic overflows (:mod:`.stats`); one without a finite value is left out."""
    rewards = [r for g in groups for r in g.rewards]
    exceptions = sum(g.num_exceptions for g in groups)
    out: dict[str, float | None] = {
        "num_groups": float(len(groups)),
        "num_trajectories": float(len(rewards)),
        "num_exceptions": float(exceptions),
        "exception_rate": exceptions / (len(rewards) + exceptions) if rewards or exceptions else 0.0,
    }
    if rewards:
        out["reward"] = stats.mean(rewards)
    stds = [stats.pstdev(g.rewards) for g in groups if len(g.rewards) > 1]
    numbers = [s for s in stds if s is not None]
    if stds:
        out["reward_std_dev"] = stats.mean(numbers) if len(numbers) == len(stds) else None
    for key, value in _means(m for g in groups for m in g.trajectory_metrics).items():
        out.setdefault(key, value)
    for key, value in _means(g.group_metrics for g in groups).items():
        out[f"group/{key}"] = value
    return {f"{split}/{key}": value for key, value in out.items() if value is not None}


def rollup(split: str, groups: Sequence[LoggedGroup]) -> dict[str, float]:
    """:func:`log_metrics` over groups read back from the store (the store's ``Rollup``)."""
    return log_metrics(
        split,
        [summarise(g.rewards, g.trajectory_metrics, g.group_metrics, g.num_exceptions) for g in groups],
    )
