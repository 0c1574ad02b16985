"""Figures of the research frames (pure ``frame -> go.Figure``, in the theme of :mod:`toolkit.plots`)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .._axes import band_edges, step_axis, value_axis, value_range
from ..plots import TEMPLATE, scatter

AGREE = "#1976d2"
DISAGREE = "#d32f2f"
MARKER_SIZE, MAX_MARKER_SIZE = 9, 40
LISTED = 6  # trajectories named in a point's hover text


def _points(part: pd.DataFrame) -> pd.DataFrame:
    """One row per distinct (old, new) reward: how many trajectories lie there and which."""
    labels = "group " + part["group"].astype(str) + " #" + part["index"].astype(str)
    grouped = part.assign(label=labels).groupby(["old_reward", "new_reward"], sort=True)["label"]
    points = grouped.agg(
        count="size", labels=lambda s: ", ".join(s.iloc[:LISTED]) + (" …" if len(s) > LISTED else "")
    )
    return points.reset_index()


def rescore(comparison: pd.DataFrame) -> go.Figure:
    """Old versus new reward (:func:`toolkit.research.rescore.comparison`): one point per distinct pair,
    its area and label counting the trajectories on it (so 32 trajectories on 5 pairs do not read as 5);
    points where they disagree (``disagree``) in red: candidates for reward hacking."""
    fig = go.Figure()
    for flag, name, color in ((False, "agree", AGREE), (True, "disagree", DISAGREE)):
        part = comparison[comparison["disagree"] == flag]
        points = _points(part)
        counts = points["count"].to_numpy()
        trace = scatter(
            len(points),
            x=points["old_reward"],
            y=points["new_reward"],
            mode="markers+text",
            name=f"{name} ({len(part)})",
            marker={"color": color, "size": np.minimum(MARKER_SIZE * np.sqrt(counts), MAX_MARKER_SIZE)},
            text=[f"×{n}" if n > 1 else "" for n in counts],
            textposition="middle right",
            customdata=points[["count", "labels"]].to_numpy(),
            hovertemplate="%{customdata[0]} trajectory(ies): %{customdata[1]}<br>old %{x}<br>new %{y}"
            "<extra></extra>",
        )
        if isinstance(trace, go.Scatter):
            trace.cliponaxis = False  # a count beside a point at the edge of the axes still shows
        fig.add_trace(trace)
    values = pd.concat([comparison["old_reward"], comparison["new_reward"]]).to_numpy(dtype=float)
    low, high = (float(values.min()), float(values.max())) if len(values) else (0.0, 1.0)
    fig.add_trace(
        go.Scatter(
            x=[low, high],
            y=[low, high],
            mode="lines",
            name="old = new",
            line={"dash": "dot", "color": "#7a7a7a"},
        )
    )
    shown = value_range(values, "reward")  # the same range on both axes: the diagonal stays diagonal
    fig.update_xaxes(range=shown)
    fig.update_yaxes(range=shown)
    fig.update_layout(
        title="Re-score: old versus new reward",
        xaxis_title="old reward",
        yaxis_title="new reward",
        template=TEMPLATE,
    )
    return fig


def evaluation(frame: pd.DataFrame) -> go.Figure:
    """Score versus checkpoint step, mean ± std (:class:`toolkit.research.evaluate.Evaluation`): whole
    steps, a [0, 1] axis for scores in it, the bars clipped to the scores seen (``score_min``/``_max``)."""
    frame = frame.sort_values("step")
    mean, std = frame["score_mean"].to_numpy(dtype=float), frame["score_std"].to_numpy(dtype=float)
    bounds = [frame[c].to_numpy(dtype=float) if c in frame else None for c in ("score_min", "score_max")]
    lower, upper = band_edges(mean, np.nan_to_num(std), *bounds)
    fig = go.Figure(
        scatter(
            len(frame),
            x=frame["step"],
            y=mean,
            error_y={"type": "data", "symmetric": False, "array": upper - mean, "arrayminus": mean - lower},
            mode="lines+markers",
            name="score",
            customdata=frame[["n"]].to_numpy(),
            hovertemplate="step %{x}<br>score %{y:.3f}<br>n %{customdata[0]}<extra></extra>",
        )
    )
    step_axis(fig, frame["step"].to_numpy(dtype=float))
    value_axis(fig, np.concatenate([lower, upper, mean]), "score")
    fig.update_layout(
        title="Evaluation across checkpoints", xaxis_title="step", yaxis_title="score", template=TEMPLATE
    )
    return fig
