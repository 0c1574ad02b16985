"""Figures of training progress: per-step lines, a job's loss and reward, checkpoint metrics and
rewards per group."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .._axes import step_axis, value_axis
from ._common import floats, layout, placeholder, reported, scatter

LOSS_KEYS = ("loss", "loss/train", "policy_loss")
REWARD_KEYS = ("reward", "train/reward")
CURVES = (("loss", LOSS_KEYS), ("reward", REWARD_KEYS))  # a panel each, drawn when the job reports it
LINE_STYLES = (("solid", "circle"), ("dash", "diamond"), ("dot", "square"), ("dashdot", "x"))


def step_lines(
    frame: pd.DataFrame, y: Sequence[str], x: str = "rl_step", title: str = "", yaxis_title: str = ""
) -> go.Figure:
    """Columns ``y`` of a per-step frame (a notebook's history of RL steps) as lines over ``x``:
    whole-step ticks, a [0, 1] axis when every value is a share or mean reward in it, and each line in
    its own dash and marker, so one that lies on another stays visible."""
    fig = go.Figure()
    steps = floats(frame[x])
    for n, column in enumerate(y):
        style = LINE_STYLES[n % len(LINE_STYLES)]
        fig.add_trace(
            scatter(
                len(frame),
                x=steps,
                y=floats(frame[column]),
                mode="lines+markers",
                name=column,
                line={"dash": style[0], "width": 2 + (len(y) - 1 - n)},  # the first lines widest
                marker={"symbol": style[1], "size": 7 + 2 * (len(y) - 1 - n)},
            )
        )
    step_axis(fig, steps)
    values = np.concatenate([floats(frame[c]) for c in y]) if y else np.array([])
    value_axis(fig, values, "score")  # [0, 1] when every value lies there (mean rewards, shares)
    return layout(fig, title, xaxis_title=x.replace("_", " "), yaxis_title=yaxis_title)


def training_curves(events: pd.DataFrame) -> go.Figure:
    """Loss and reward over gradient steps (:func:`toolkit.frames.events_frame`), one panel each, stacked;
    only the metrics the job reports get a panel (an SFT job has no reward)."""
    steps = events[events["type"] == "gradient_step"] if "type" in events else events
    panels = [(label, column) for label, keys in CURVES if (column := reported(steps, keys))]
    if not panels:
        return placeholder("no gradient step yet", "Training")
    fig = make_subplots(rows=len(panels), cols=1, shared_xaxes=True, vertical_spacing=0.08)
    x = floats(steps["step"])
    for row, (label, column) in enumerate(panels, start=1):
        y = floats(steps[column])
        fig.add_trace(scatter(len(x), x=x, y=y, mode="lines+markers", name=label), row=row, col=1)
        fig.update_yaxes(title_text=label, row=row, col=1)
        value_axis(fig, y, column, row=row, col=1)
    step_axis(fig, x)
    fig.update_xaxes(title_text="gradient step", row=len(panels), col=1)
    return layout(fig, "Training", showlegend=False, height=220 + 160 * len(panels))


def checkpoint_metrics(checkpoints: pd.DataFrame, metric: str, by: str = "model_id") -> go.Figure:
    """One metric over checkpoint steps, one line per model (``by`` column) overlaid."""
    fig = go.Figure()
    groups = checkpoints.groupby(by, dropna=False, sort=False) if by in checkpoints else [(None, checkpoints)]
    for key, part in groups:
        part = part.sort_values("step")
        y = floats(part[metric]) if metric in part else np.full(len(part), np.nan)
        name = str(key[0] if isinstance(key, tuple) else key) if key is not None else metric
        fig.add_trace(scatter(len(part), x=floats(part["step"]), y=y, mode="lines+markers", name=name))
    step_axis(fig, floats(checkpoints["step"]))
    if metric != "step" and metric in checkpoints:
        value_axis(fig, floats(checkpoints[metric]), metric)
    return layout(fig, metric, xaxis_title="step", yaxis_title=metric)


def reward_distribution(trajectories: pd.DataFrame, by: str = "group") -> go.Figure:
    """Rewards of each group as a box with every point, from :func:`toolkit.frames.groups_frame`."""
    fig = go.Figure()
    for key, part in trajectories.groupby(by, sort=True):
        fig.add_trace(go.Box(y=floats(part["reward"]), name=str(key), boxpoints="all", jitter=0.3))
    return layout(fig, "Reward per group", xaxis_title=by, yaxis_title="reward", showlegend=False)
