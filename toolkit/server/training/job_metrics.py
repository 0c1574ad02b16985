"""The numbers a training job reports: its gradient-step event data and its checkpoint's metrics.

Event data and checkpoint metrics are numbers only (ART's client calls ``float`` on every value),
so a statistic that is not a finite number is left out; means never overflow (:mod:`.stats`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence

from ...types.training import TrajectoryGroup
from . import stats
from .log_metrics import log_metrics, summarise


def numbers(metrics: Mapping[str, float | None]) -> dict[str, float]:
    """The entries of ``metrics`` that are finite numbers."""
    return {k: float(v) for k, v in metrics.items() if v is not None and math.isfinite(v)}


# keys a job summarises by their extreme over its steps rather than their mean (TRL's min/max keys)
EXTREMES: dict[str, Callable[[Sequence[float]], float | None]] = {
    "clip_ratio/low_min": min,
    "clip_ratio/high_max": max,
}


def over_steps(steps: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Per key (sorted), the mean over the steps that report it (the min or max for :data:`EXTREMES`)."""
    columns: dict[str, list[float]] = defaultdict(list)
    for step in steps:
        for key, value in step.items():
            columns[key].append(value)
    return numbers({key: EXTREMES.get(key, stats.mean)(columns[key]) for key in sorted(columns)})


def train_metrics(groups: Sequence[TrajectoryGroup]) -> dict[str, float]:
    """``train/...`` metrics of an RL job's groups, as ``/log`` computes them for a split."""
    return log_metrics(
        "train",
        [
            summarise(
                [t.reward for t in g.trajectories],
                [dict(t.metrics) for t in g.trajectories],
                dict(g.metrics),
                len(g.exceptions),
            )
            for g in groups
        ],
    )
