"""Statistics over user numbers never overflow; a result that is not a finite number is None."""

from __future__ import annotations

import math

import pytest

from toolkit.server.training import stats
from toolkit.server.training.log_metrics import log_metrics, summarise


@pytest.mark.parametrize(
    ("values", "mean", "std"),
    [
        ([1.0, 0.0, 0.5], 0.5, math.sqrt(1 / 6)),
        ([-2.8e160, 1.1], -1.4e160, 1.4e160),
        ([1e308, -1e308], 0.0, 1e308),
        ([1e308, 1e308], 1e308, 0.0),
        ([1.7e308, 1.7e308, -1.7e308], 1.7e308 / 3, 1.7e308 / 3 * math.sqrt(8)),
    ],
)
def test_mean_and_std_of_extreme_finite_values(values: list[float], mean: float, std: float) -> None:
    assert stats.mean(values) == pytest.approx(mean, rel=1e-12)
    assert stats.pstdev(values) == pytest.approx(std, rel=1e-12)


def test_plain_values_keep_the_plain_formula() -> None:
    values = [0.1, 0.7, 0.25]
    centre = sum(values) / 3
    assert stats.mean(values) == centre
    assert stats.pstdev(values) == math.sqrt(sum((v - centre) ** 2 for v in values) / 3)


@pytest.mark.parametrize("values", [[], [math.inf, 1.0], [-math.inf, math.inf], [math.nan]])
def test_no_number_is_none(values: list[float]) -> None:
    assert stats.mean(values) is None
    assert stats.pstdev(values) is None


def test_log_metrics_with_extreme_rewards_and_infinite_metrics() -> None:
    groups = [
        summarise([-2.8e160, 1.1], [{"m": math.inf}, {"m": 1.0}], {"g": 1e308}, 0),
        summarise([1e308, 1e308], [{"m": 2.0}, {}], {"g": 1e308}, 0),
    ]
    metrics = log_metrics("val", groups)
    assert metrics["val/reward"] == pytest.approx(5e307, rel=1e-12)  # the sum overflows, the mean does not
    assert metrics["val/reward_std_dev"] == pytest.approx(1.4e160 / 2, rel=1e-12)
    assert metrics["val/m"] == 1.5  # the infinite value is left out: mean of 1 and 2
    assert metrics["val/group/g"] == 1e308
