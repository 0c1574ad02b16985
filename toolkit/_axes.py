"""Axes that do not mislead, shared by every figure of :mod:`toolkit.plots` and
:mod:`toolkit.research.figures` (``tk.plots.step_axis``, ``value_axis`` and ``band_edges`` too).

Steps are whole numbers (:func:`step_axis`); a score or share that lies in [0, 1] is drawn on [0, 1],
a metric that barely moves is drawn flat, at least its :data:`MIN_SPAN` tall (:func:`value_range`);
bands (``mean ± std``, a t-interval) stop at the values seen and at the values the metric can take
(:func:`band_edges`, :func:`possible_range`: no entropy below 0, no share above 1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from .types.training import CHECKPOINT_METRIC_NAMES

FROM_CHECKPOINT = {name: key for key, name in CHECKPOINT_METRIC_NAMES.items()}  # loss/entropy -> entropy
UNIT_RANGE = (-0.05, 1.05)  # a [0, 1] axis, with room for the markers at 0 and 1
SCORES = {"reward", "score", "score_mean", "success", "accuracy", "called", "answered", "exception_rate"}
# A metric moving less than its minimum span is drawn flat, not as a collapse: (share of its largest
# magnitude, absolute floor). Metrics not named here keep plotly's range.
MIN_SPAN: dict[str, tuple[float, float]] = {
    "entropy": (0.5, 0.0),
    "loss": (0.2, 0.0),
    "grad_norm": (0.5, 0.0),
    "learning_rate": (0.5, 0.0),
    "kl": (0.2, 0.01),
    "kl_policy_ref": (0.2, 0.01),
    "completions/mean_length": (0.2, 2.0),
    "throughput/tokens_per_s": (0.2, 0.0),
    "reward": (0.0, 0.1),
}


# What a metric can take, by its name (after FROM_CHECKPOINT): shares lie in [0, 1]; spreads, counts,
# lengths, times, rates, entropies and norms are not negative. Rewards, losses, KL estimates: unbounded.
SHARES = ("frac_", "fraction", "clip_ratio/", "clipped_ratio", "exception_rate", "success", "accuracy")
NOT_NEGATIVE = (
    "entropy", "grad_norm", "learning_rate", "_std", "std_dev", "num_", "tokens", "length", "timing_s/",
    "throughput/", "importance_ratio",
)  # fmt: skip


def possible_range(metric: str) -> tuple[float, float]:
    """The values ``metric`` can take, read off its name: [0, 1] for a share (:data:`SHARES`), [0, inf)
    for what cannot be negative (:data:`NOT_NEGATIVE`), else unbounded."""
    name = FROM_CHECKPOINT.get(metric, metric)
    if any(part in name for part in SHARES):
        return 0.0, 1.0
    if any(part in name for part in NOT_NEGATIVE):
        return 0.0, math.inf
    return -math.inf, math.inf


def _metric(name: str) -> str:
    """The gradient-step name of a metric (``loss/entropy`` -> ``entropy``, ``val/reward`` -> ``reward``)."""
    name = FROM_CHECKPOINT.get(name, name)
    return name.rsplit("/", 1)[-1] if name.rsplit("/", 1)[-1] in SCORES else name


def is_unit(metric: str) -> bool:
    """Whether ``metric`` is a share (``frac_*``, ``*ratio*``) or a score (:data:`SCORES`): drawn on
    [0, 1] when its values lie there (a reward need not)."""
    name = _metric(metric)
    return name in SCORES or "frac_" in name or "ratio" in name


def value_range(values: Sequence[float] | np.ndarray, metric: str = "") -> list[float] | None:
    """The y range that shows ``values`` of ``metric`` honestly, or None for plotly's own: [0, 1] for a
    score or share whose values all lie in it (:func:`is_unit`); a constant from 0 to twice it (not
    plotly's v ± 1); else at least the metric's :data:`MIN_SPAN`, so a tiny wobble draws flat (from 0
    up for values that are not negative)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if not len(v):
        return None
    low, high = float(v.min()), float(v.max())
    if is_unit(metric) and low >= 0.0 and high <= 1.0:
        return list(UNIT_RANGE)
    if low == high != 0.0:
        return sorted([0.0, 2 * low])
    share, floor = MIN_SPAN.get(_metric(metric), (0.0, 0.0))
    span = max(floor, share * float(np.abs(v).max()))
    if high - low >= span:
        return None
    bottom = (low + high - span) / 2
    if low >= 0.0:
        bottom = max(bottom, 0.0)
    return [bottom - 0.05 * span, bottom + 1.05 * span]  # 5% margins: markers at the edges show whole


def value_axis(fig: go.Figure, values: Sequence[float] | np.ndarray, metric: str = "", **cell: Any) -> None:
    """Set the y axis (of ``cell``: ``row``, ``col``) to :func:`value_range`."""
    shown = value_range(values, metric)
    if shown is not None:
        fig.update_yaxes(range=shown, **cell)


def step_axis(fig: go.Figure, steps: Sequence[float] | np.ndarray, **cell: Any) -> None:
    """Steps are whole numbers: whole-number ticks, one per step over a short run (``0, 1, 2``, never
    ``0, 0.5, 1``), 2, 5, 10, ... apart over a long one."""
    s = np.asarray(steps, dtype=float)
    s = s[np.isfinite(s)]
    if not len(s):
        return
    low, high = float(s.min()), float(s.max())
    if high - low <= 12:
        fig.update_xaxes(tick0=0, dtick=1, range=[low - 0.5, high + 0.5], **cell)
        return
    rough = (high - low) / 10
    magnitude = 10 ** math.floor(math.log10(rough))
    dtick = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= rough)
    fig.update_xaxes(tick0=0, dtick=dtick, **cell)


def band_edges(
    mean: np.ndarray,
    std: np.ndarray,
    low: np.ndarray | None = None,
    high: np.ndarray | None = None,
    *,
    metric: str = "",
) -> tuple[np.ndarray, np.ndarray]:
    """``mean - std`` and ``mean + std`` (any half-width), clipped to the observed ``low``/``high`` of
    each step where known (a reward in [0, 1] never gets a band above 1) and to the values ``metric``
    can take (:func:`possible_range`: an entropy's band never goes below 0)."""
    lower, upper = mean - std, mean + std
    if low is not None:
        lower = np.where(np.isfinite(low), np.maximum(lower, low), lower)
    if high is not None:
        upper = np.where(np.isfinite(high), np.minimum(upper, high), upper)
    floor, ceiling = possible_range(metric)
    return np.maximum(lower, floor), np.minimum(upper, ceiling)
