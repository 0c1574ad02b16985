"""The metrics ART computes when trajectories are logged, prefixed by split (``val/reward``, ...)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


@dataclass
class GroupSummary:
    """What the metrics need of one trajectory group."""

    rewards: list[float]
    trajectory_metrics: list[dict[str, float]]
    group_metrics: dict[str, float] = field(default_factory=dict)
    num_exceptions: int = 0


def _numeric(values: dict[str, object]) -> dict[str, float]:
    return {
        k: float(v)
        for k, v in values.items()
        if isinstance(v, int | float) and not (isinstance(v, float) and math.isnan(v))
    }


def summarise(
    rewards: Sequence[float],
    metrics: Iterable[dict[str, object]],
    group_metrics: dict[str, object],
    num_exceptions: int,
) -> GroupSummary:
    return GroupSummary(
        list(rewards), [_numeric(m) for m in metrics], _numeric(group_metrics), num_exceptions
    )


def _pstdev(values: Sequence[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def _means(rows: Iterable[dict[str, float]]) -> dict[str, float]:
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for row in rows:
        for key, value in row.items():
            sums[key] += value
            counts[key] += 1
    return {key: sums[key] / counts[key] for key in sums}


def log_metrics(split: str, groups: Sequence[GroupSummary]) -> dict[str, float]:
    """``{split}/reward`` (mean), ``reward_std_dev`` (mean population std over groups of 2+),
    ``exception_rate``, means of custom trajectory metrics, ``group/<key>`` means of group metrics,
    and counts."""
    rewards = [r for g in groups for r in g.rewards]
    exceptions = sum(g.num_exceptions for g in groups)
    out: dict[str, float] = {
        "num_groups": float(len(groups)),
        "num_trajectories": float(len(rewards)),
        "num_exceptions": float(exceptions),
        "exception_rate": exceptions / (len(rewards) + exceptions) if rewards or exceptions else 0.0,
    }
    if rewards:
        out["reward"] = sum(rewards) / len(rewards)
    stds = [_pstdev(g.rewards) for g in groups if len(g.rewards) > 1]
    if stds:
        out["reward_std_dev"] = sum(stds) / len(stds)
    for key, value in _means(m for g in groups for m in g.trajectory_metrics).items():
        out.setdefault(key, value)
    for key, value in _means(g.group_metrics for g in groups).items():
        out[f"group/{key}"] = value
    return {f"{split}/{key}": value for key, value in out.items()}
