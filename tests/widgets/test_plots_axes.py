"""Figures that do not mislead, read off the figure objects: whole-number step ticks, a [0, 1] axis for
scores in it, overlapping points counted, ``mean ± std`` bands inside what was seen, and a metric that
barely moves drawn flat (``toolkit/_axes.py``, used by every figure of plots and research)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest
from test_plots import events, values

from toolkit import _axes, frames, plots
from toolkit.research import evaluation_figure, rescore_figure

UNIT = (-0.05, 1.05)


def health(steps: int = 3, **columns: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"step": list(range(1, steps + 1)), **columns})


def axis_of(fig: go.Figure, trace: Any, letter: str) -> Any:
    """The layout axis a trace is drawn on (``x``/``y``, ``x2``/``y2`` ...)."""
    name = getattr(trace, f"{letter}axis") or letter
    return fig.layout[name.replace(letter, f"{letter}axis", 1)]


def evaluation(scores: dict[int, list[float]]) -> pd.DataFrame:
    rows = [
        {
            "step": step,
            "score_mean": float(np.mean(s)),
            "score_std": float(np.std(s)),
            "score_min": min(s),
            "score_max": max(s),
            "n": len(s),
        }
        for step, s in scores.items()
    ]
    return pd.DataFrame(rows)


def test_steps_get_whole_number_ticks_in_every_figure() -> None:
    """Three steps read 1, 2, 3 (not 1, 1.5, 2, 2.5, 3); a long run ticks 5 or 10 apart, never between."""
    checkpoints = frames.checkpoints_frame(
        [{"id": str(s), "step": s, "metrics": {"val/reward": 0.5}} for s in (0, 1, 2)], "m"
    )
    figures = {
        "training_curves": plots.training_curves(events(3)),
        "checkpoint_metrics": plots.checkpoint_metrics(checkpoints, "val/reward"),
        "run_health": plots.run_health(health(entropy=[2.0, 1.9, 1.8])),
        "runs_overlay": plots.runs_overlay({"a": health(reward=[0.1, 0.2, 0.3])}, "reward"),
        "evaluation": evaluation_figure(evaluation({0: [0.0], 1: [0.0], 2: [1.0]})),
        "step_lines": plots.step_lines(
            pd.DataFrame({"rl_step": [0, 1, 2], "reward": [0.0, 0.5, 1.0]}), ["reward"]
        ),
    }
    for name, fig in figures.items():
        for axis in fig.select_xaxes():
            assert (axis.tick0, axis.dtick) == (0, 1), name
            low, high = axis.range
            assert high - low == 3 and low % 1 == 0.5, name  # a half step of room at each end
    long = plots.step_lines(pd.DataFrame({"rl_step": range(40), "reward": np.linspace(0, 1, 40)}), ["reward"])
    assert (long.layout.xaxis.tick0, long.layout.xaxis.dtick) == (0, 5)
    assert plots.step_axis(go.Figure(), [np.nan]) is None  # nothing to tick: left alone


def test_a_score_in_0_1_gets_a_0_1_axis() -> None:
    """09's evaluation at 0.0 on every step drew -1..1; a share or mean reward in [0, 1] reads on [0, 1]."""
    flat = evaluation_figure(evaluation({0: [0.0, 0.0], 1: [0.0, 0.0], 2: [0.0, 0.0]}))
    assert tuple(flat.layout.yaxis.range) == UNIT
    fig = plots.run_health(health(reward=[0.2, 0.4, 0.5], frac_reward_zero_std=[0.5, 0.25, 0.0]))
    for trace in fig.data:
        assert tuple(axis_of(fig, trace, "y").range) == UNIT, trace.name
    lines = plots.step_lines(
        pd.DataFrame({"rl_step": [0, 1], "reward": [0.0, 0.0], "called": [0.0, 0.5]}), ["reward", "called"]
    )
    assert tuple(lines.layout.yaxis.range) == UNIT
    # a reward that is not in [0, 1] keeps its own range; so does a count of tool calls
    assert plots.run_health(health(reward=[-1.0, 0.5, 2.0])).layout.yaxis.range is None
    counts = plots.step_lines(pd.DataFrame({"rl_step": [0, 1], "tool_calls": [0.5, 1.5]}), ["tool_calls"])
    assert counts.layout.yaxis.range is None


def test_mean_std_bands_stop_at_the_rewards_seen() -> None:
    """A mean of 0.9 with std 0.3 of rewards in [0, 1]: the band reaches 1.0, not 1.2 (RunHealth and
    RunCompare); the evaluation's error bars likewise stop at the lowest and highest score."""
    frame = health(
        reward=[0.5, 0.9, 0.9],
        reward_std=[0.5, 0.3, 0.3],
        reward_min=[0.0, 0.0, 0.7],
        reward_max=[1.0, 1.0, 1.0],
    )
    for fig in (
        plots.run_health(frame),
        plots.runs_overlay({"a": frame, "b": frame}, "reward", band="reward_std"),
    ):
        bands = [t for t in fig.data if t.fill == "toself"]
        assert bands and all(max(b.y) == 1.0 and min(b.y) == 0.0 and b.mode == "lines" for b in bands)
        # upper edges 1.0 (not 1.2), lower edges 0.0, 0.9 - 0.3 and the step's lowest reward 0.7
        assert np.allclose(bands[0].y, [1.0, 1.0, 1.0, 0.7, 0.6, 0.0])
    lower, upper = plots.band_edges(np.array([0.5, 0.5]), np.array([0.2, 0.2]), np.array([0.4, np.nan]), None)
    assert lower.tolist() == [0.4, 0.3] and upper.tolist() == [0.7, 0.7]  # unknown bounds: not clipped
    scored = evaluation_figure(evaluation({0: [0.0, 1.0, 1.0, 1.0], 1: [1.0, 1.0]})).data[0]
    mean = np.array(scored.y)
    assert np.allclose(mean + values(scored.error_y.array), [1.0, 1.0])
    assert np.allclose(mean - values(scored.error_y.arrayminus), [0.75 - np.sqrt(0.1875), 1.0])


def test_a_metric_that_barely_moves_draws_flat() -> None:
    """Entropy from 2.0 to 1.9986 (a change of 0.0014) is not drawn across the whole panel like a collapse."""
    wobble = plots.run_health(health(entropy=[2.0, 1.9993, 1.9986]))
    low, high = wobble.layout.yaxis.range
    assert high - low >= 1.0 and low <= 1.9986 and high >= 2.0
    collapse = plots.run_health(health(entropy=[2.0, 1.0, 0.2]))
    assert collapse.layout.yaxis.range is None  # a real fall keeps the data's own range
    named = plots.checkpoint_metrics(
        frames.checkpoints_frame(
            [{"id": str(s), "step": s, "metrics": {"loss/entropy": 2.0 - s * 1e-4}} for s in (1, 2)], "m"
        ),
        "loss/entropy",
    )
    assert np.diff(named.layout.yaxis.range)[0] >= 1.0  # the checkpoint's name for it too
    low, high = plots.runs_overlay({"a": health(kl=[0.0, 0.0001, 0.0002])}, "kl").layout.yaxis.range
    assert low < 0 < 0.0002 < 0.01 < high  # a KL of 2e-4 stays at the bottom of a 0.01 span
    constant = plots.run_health(health(learning_rate=[1e-4] * 3)).layout.yaxis.range
    assert tuple(constant) == (0.0, 2e-4)  # a constant: from 0 to twice it


def test_overlapping_points_are_counted() -> None:
    """09's re-score: 32 trajectories on 5 (old, new) pairs read as 5 points with their counts."""
    pairs = [(0.5, 0.5)] * 14 + [(1.0, 1.0)] * 9 + [(0.5, 0.0)] * 5 + [(1.0, 0.0)] * 3 + [(0.0, 1.0)]
    comparison = pd.DataFrame(
        [
            {"group": i // 4, "index": i % 4, "old_reward": old, "new_reward": new, "delta": new - old}
            for i, (old, new) in enumerate(pairs)
        ]
    ).assign(disagree=lambda f: f["delta"].abs() >= 0.1)
    agree, disagree, diagonal = rescore_figure(comparison).data
    assert (agree.name, disagree.name, diagonal.name) == ("agree (23)", "disagree (9)", "old = new")
    counts = {
        (x, y): int(c[0]) for t in (agree, disagree) for x, y, c in zip(t.x, t.y, t.customdata, strict=True)
    }
    assert counts == {(0.5, 0.5): 14, (1.0, 1.0): 9, (0.0, 1.0): 1, (0.5, 0.0): 5, (1.0, 0.0): 3}
    sizes = dict(zip(zip(agree.x, agree.y, strict=True), agree.marker.size, strict=True))
    assert sizes[(0.5, 0.5)] > sizes[(1.0, 1.0)] > 9  # area grows with the count
    assert list(agree.text) == ["×14", "×9"] and "×" not in disagree.text[0]  # a single point: no label
    assert "group 0 #0, group 0 #1" in agree.customdata[0][1] and agree.customdata[0][1].endswith("…")
    fig = rescore_figure(comparison)
    assert tuple(fig.layout.xaxis.range) == tuple(fig.layout.yaxis.range) == UNIT


def test_step_lines_keep_a_line_on_another_visible() -> None:
    """07's reward line lay under its ``called`` line: each line gets its own dash, marker and width."""
    history = pd.DataFrame({"rl_step": [0, 1, 2], "reward": [0.0] * 3, "called": [0.0] * 3})
    reward, called = plots.step_lines(history, ["reward", "called"], title="t", yaxis_title="mean").data
    assert (reward.line.dash, called.line.dash) == ("solid", "dash")
    assert reward.marker.symbol != called.marker.symbol and reward.line.width > called.line.width
    assert list(reward.y) == list(called.y) == [0.0] * 3


@pytest.mark.parametrize(
    ("metric", "unit"),
    [
        ("reward", True),
        ("train/reward", True),
        ("val/reward", True),
        ("frac_reward_zero_std", True),
        ("clip_ratio/region_mean", True),
        ("score_mean", True),
        ("entropy", False),
        ("reward_std", False),
        ("tool_calls", False),
    ],
)
def test_which_metrics_are_scores_or_shares(metric: str, unit: bool) -> None:
    assert (_axes.value_range([0.2, 0.3], metric) == list(UNIT)) is unit
