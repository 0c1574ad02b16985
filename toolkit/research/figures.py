"""Figures of the research frames (pure ``frame -> go.Figure``, in the theme of :mod:`toolkit.plots`)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from ..plots import TEMPLATE, scatter

AGREE = "#1976d2"
DISAGREE = "#d32f2f"


def rescore(comparison: pd.DataFrame) -> go.Figure:
    """Old versus new reward, one point per trajectory (:func:`toolkit.research.rescore.comparison`);
    points where they disagree (``disagree``) in red: candidates for reward hacking."""
    fig = go.Figure()
    for flag, name, color in ((False, "agree", AGREE), (True, "disagree", DISAGREE)):
        part = comparison[comparison["disagree"] == flag]
        fig.add_trace(
            scatter(
                len(part),
                x=part["old_reward"],
                y=part["new_reward"],
                mode="markers",
                name=f"{name} ({len(part)})",
                marker={"color": color, "size": 9},
                customdata=part[["group", "index"]].to_numpy(),
                hovertemplate="group %{customdata[0]} #%{customdata[1]}<br>old %{x}<br>new %{y}"
                "<extra></extra>",
            )
        )
    values = pd.concat([comparison["old_reward"], comparison["new_reward"]])
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
    fig.update_layout(
        title="Re-score: old versus new reward",
        xaxis_title="old reward",
        yaxis_title="new reward",
        template=TEMPLATE,
    )
    return fig


def evaluation(frame: pd.DataFrame) -> go.Figure:
    """Score versus checkpoint step, mean ± std (:class:`toolkit.research.evaluate.Evaluation`)."""
    frame = frame.sort_values("step")
    fig = go.Figure(
        scatter(
            len(frame),
            x=frame["step"],
            y=frame["score_mean"],
            error_y={"type": "data", "array": frame["score_std"]},
            mode="lines+markers",
            name="score",
            customdata=frame[["n"]].to_numpy(),
            hovertemplate="step %{x}<br>score %{y:.3f}<br>n %{customdata[0]}<extra></extra>",
        )
    )
    fig.update_layout(
        title="Evaluation across checkpoints", xaxis_title="step", yaxis_title="score", template=TEMPLATE
    )
    return fig
