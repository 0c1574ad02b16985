"""Statistics over user numbers (rewards, custom metrics) that never overflow.

Any finite float is a valid reward, so ``sum`` or a square may leave the float range (``1e308 +
1e308``, ``(1e160) ** 2``). Where the plain formula overflows, these compute on the values scaled
into [-1, 1] and scale the result back; a result that is still not a finite number (an input was
infinite, or the mean of huge values is beyond the float range) is ``None``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def mean(values: Sequence[float]) -> float | None:
    """The arithmetic mean; ``None`` for no values or a non-finite value."""
    if not values or not all(math.isfinite(v) for v in values):
        return None
    total = sum(values)
    if math.isfinite(total):
        return total / len(values)
    scale = max(abs(v) for v in values)
    result = scale * (sum(v / scale for v in values) / len(values))
    return result if math.isfinite(result) else None


def pstdev(values: Sequence[float]) -> float | None:
    """The population standard deviation; ``None`` for no values or a non-finite value. Finite
    for any finite values (it is at most the largest magnitude)."""
    if not values or not all(math.isfinite(v) for v in values):
        return None
    try:
        centre = sum(values) / len(values)
        result = math.sqrt(sum((v - centre) ** 2 for v in values) / len(values))
    except OverflowError:
        result = math.inf
    if math.isfinite(result):
        return result
    scale = max(abs(v) for v in values)
    scaled = [v / scale for v in values]
    centre = sum(scaled) / len(scaled)
    return scale * math.sqrt(sum((v - centre) ** 2 for v in scaled) / len(scaled))
