"""Confidence intervals of a mean over a few seeds: Student's t-interval, with no SciPy.

With a handful of seeds (the usual 3-10 of RL papers) the normal interval is far too narrow: the
95% t quantile is 4.30 for 3 seeds, 2.26 for 10, against the normal 1.96. The quantile comes from
the closed form of Student's t distribution for whole degrees of freedom (Abramowitz & Stegun
26.7.3-4), inverted by bisection.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def _within(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with ``df`` (whole, >= 1) degrees of freedom."""
    theta = math.atan(t / math.sqrt(df))
    c2, term, total = math.cos(theta) ** 2, 1.0, 1.0
    if df % 2:  # odd: (2/pi) (theta + sin cos (1 + 2/3 cos^2 + 2*4/(3*5) cos^4 + ...))
        if df == 1:
            return 2 * theta / math.pi
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        return 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)
    for k in range(1, df // 2):  # even: sin (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ...)
        term *= c2 * (2 * k - 1) / (2 * k)
        total += term
    return math.sin(theta) * total


def t_quantile(level: float, df: int) -> float:
    """The ``t`` with ``P(|T| <= t) = level`` (e.g. 4.303 for 0.95 and 2 degrees of freedom)."""
    if not 0 < level < 1 or df < 1:
        raise ValueError(f"need 0 < level < 1 and df >= 1, not level={level}, df={df}")
    low, high = 0.0, 1.0
    while _within(high, df) < level:
        high *= 2
    for _ in range(100):
        mid = (low + high) / 2
        low, high = (mid, high) if _within(mid, df) < level else (low, mid)
    return (low + high) / 2


def mean_interval(values: Sequence[float] | np.ndarray, level: float = 0.95) -> tuple[float, float, int]:
    """(mean, half-width of its ``level`` t-interval, n) of the finite values; the half-width is NaN
    for fewer than two values (one seed says nothing about the spread)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    n = len(v)
    if n == 0:
        return math.nan, math.nan, 0
    mean = float(v.mean())
    if n < 2:
        return mean, math.nan, n
    return mean, t_quantile(level, n - 1) * float(v.std(ddof=1)) / math.sqrt(n), n
