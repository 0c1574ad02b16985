"""Figures with bands: a run's RL health, runs overlaid, and the mean over seeds with its t-interval."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

from .._axes import band_edges, step_axis, value_axis
from .._stats import mean_interval
from ..health import FROM_CHECKPOINT, HealthWarning, fetch_health, health_warnings
from ._common import floats, layout, placeholder, reported, scatter

if TYPE_CHECKING:
    from ..client import Client

# (title, ((column, label, style), ...)): a panel each, drawn when one of its columns has a value; its y
# axis is the :func:`value_range` of its first column's metric (a [0, 1] axis for the shares)
HEALTH_PANELS: tuple[tuple[str, tuple[tuple[str, str, str], ...]], ...] = (
    (
        "reward",
        (("reward", "mean", "line"), ("reward_min", "min", "dot"), ("reward_max", "max", "dot")),
    ),
    ("zero-std groups", (("frac_reward_zero_std", "frac_reward_zero_std", "line"),)),
    (
        "completion length",
        (
            ("completions/mean_length", "mean", "line"),
            ("completions/min_length", "min", "dot"),
            ("completions/max_length", "max", "dot"),
        ),
    ),
    ("clipped by max_tokens", (("completions/clipped_ratio", "clipped_ratio", "line"),)),
    ("entropy", (("entropy", "entropy", "line"),)),
    (
        "KL / clip",
        (
            ("kl", "kl", "line"),
            ("kl_policy_ref", "kl_policy_ref", "dash"),
            ("clip_ratio/region_mean", "clip region", "dot"),
            ("clip_ratio/low_mean", "clip low", "dot"),
            ("clip_ratio/high_mean", "clip high", "dot"),
        ),
    ),
    ("grad norm", (("grad_norm", "grad_norm", "line"),)),
    ("learning rate", (("learning_rate", "learning_rate", "line"),)),
    ("tokens/s", (("throughput/tokens_per_s", "tokens/s", "line"),)),
    ("loss", (("loss", "loss", "line"),)),
)
WARNING_COLOR = "#d62728"


def _band(
    fig: go.Figure, x: np.ndarray, edges: tuple[np.ndarray, np.ndarray], color: str, **cell: Any
) -> None:
    """A translucent filled area between ``edges`` (:func:`band_edges`) in ``color``."""
    lower, upper = edges
    fig.add_trace(
        go.Scatter(
            x=np.concatenate([x, x[::-1]]),
            y=np.concatenate([upper, lower[::-1]]),
            mode="lines",  # an area: no markers at its corners, which would read as data
            fill="toself",
            fillcolor=color,
            opacity=0.25,
            line={"width": 0},
            hoverinfo="skip",
            showlegend=False,
        ),
        **cell,
    )


def run_health(
    frame: pd.DataFrame | None = None,
    *,
    client: Client | None = None,
    job_id: str | None = None,
    model_id: str | None = None,
    warnings: Sequence[HealthWarning] | None = None,
) -> go.Figure:
    """A run's RL health as small multiples over steps (:func:`toolkit.health.job_health` or
    :func:`~toolkit.health.model_health` frame, or read through ``client`` for a job or a model): the
    reward with its ``mean ± reward_std`` band and min/max, the zero-std share, completion lengths, the
    share cut by max_tokens, entropy, KL and clip fractions, grad norm, learning rate, tokens/s and loss.
    Each :func:`~toolkit.health.health_warnings` warning is drawn on its metric's panel in red."""
    if frame is None:
        if client is None:
            raise ValueError("give a health frame, or a client with a job_id or model_id")
        frame = fetch_health(client, job_id=job_id, model_id=model_id)
    frame = frame.sort_values("step") if "step" in frame else frame
    found = warnings if warnings is not None else health_warnings(frame)
    panels = [(t, [c for c in cols if reported(frame, (c[0],))]) for t, cols in HEALTH_PANELS]
    panels = [p for p in panels if p[1]]
    if not panels:
        return placeholder("no RL step metrics yet", "RL health")
    cols = 2
    rows = math.ceil(len(panels) / cols)
    titles = [t for t, _ in panels]
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles, vertical_spacing=0.3 / rows + 0.04)
    x = floats(frame["step"]) if "step" in frame else np.arange(len(frame), dtype=float)
    where: dict[str, tuple[int, int]] = {}
    for i, (_, columns) in enumerate(panels):
        cell = {"row": i // cols + 1, "col": i % cols + 1}
        for n, (column, label, style) in enumerate(columns):
            where.setdefault(column, (cell["row"], cell["col"]))
            color = pio.templates["plotly"].layout.colorway[n % 10]
            y = floats(frame[column])
            if column == "reward" and reported(frame, ("reward_std",)):
                _band(fig, x, _bounded_band(frame, "reward", "reward_std"), color, **cell)
            line = {"color": color, "dash": None if style == "line" else style}
            fig.add_trace(scatter(len(x), x=x, y=y, mode="lines+markers", name=label, line=line), **cell)
        value_axis(fig, np.concatenate([floats(frame[c]) for c, _, _ in columns]), columns[0][0], **cell)
    for warning in found:
        row, col = where.get(warning.metric, (1, 1))
        fig.add_vline(x=warning.step, line={"color": WARNING_COLOR, "dash": "dash"}, row=row, col=col)
        fig.add_annotation(
            text=f"⚠ {warning.rule.replace('_', ' ')}",
            x=warning.step,
            y=1,
            yref="y domain",
            xanchor="right",
            showarrow=False,
            font={"color": WARNING_COLOR},
            row=row,
            col=col,
        )
    step_axis(fig, x)
    fig.update_xaxes(title_text=frame.attrs.get("x", "step"), row=rows)
    title = f"RL health: {len(found)} warning(s)" if found else "RL health"
    return layout(fig, title, showlegend=False, height=180 + 210 * rows)


def _bounded_band(frame: pd.DataFrame, metric: str, band: str) -> tuple[np.ndarray, np.ndarray]:
    """``metric ± band`` of a frame, clipped to its ``<metric>_min``/``<metric>_max`` columns if any."""
    bounds = [floats(frame[c]) if c in frame else None for c in (f"{metric}_min", f"{metric}_max")]
    return band_edges(floats(frame[metric]), np.nan_to_num(floats(frame[band])), *bounds, metric=metric)


def runs_overlay(frames: Mapping[str, pd.DataFrame], metric: str, band: str | None = None) -> go.Figure:
    """One metric of several runs (health frames by name) overlaid over steps; with ``band`` (a column,
    e.g. ``reward_std``) each line gets its ``metric ± band`` area."""
    fig = go.Figure()
    colorway = pio.templates["plotly"].layout.colorway
    xs = set()
    steps: list[np.ndarray] = []
    values: list[np.ndarray] = []
    for n, (name, frame) in enumerate(frames.items()):
        color = colorway[n % len(colorway)]
        part = frame.sort_values("step") if "step" in frame else frame
        x = floats(part["step"]) if "step" in part else np.arange(len(part), dtype=float)
        y = floats(part[metric]) if metric in part else np.full(len(part), np.nan)
        if band is not None and band in part and metric in part:
            edges = _bounded_band(part, metric, band)
            _band(fig, x, edges, color)
            values += edges
        fig.add_trace(scatter(len(x), x=x, y=y, mode="lines+markers", name=name, line={"color": color}))
        xs.add(frame.attrs.get("x", "step"))
        steps.append(x)
        values.append(y)
    title = f"{metric} ± {band}" if band else metric
    step_axis(fig, np.concatenate(steps) if steps else np.array([]))
    value_axis(fig, np.concatenate(values) if values else np.array([]), metric)
    return layout(fig, title, xaxis_title=" / ".join(sorted(xs)) or "step", yaxis_title=metric)


# ----------------------------------------------------------------------------- seeds


def seed_steps(frame: pd.DataFrame, metric: str, level: float = 0.95) -> pd.DataFrame:
    """Per step of a long sweep frame (``seed, step, metric, value``; :class:`toolkit.research.SweepResult`):
    ``n`` seeds, their ``mean``, the ``level`` t-interval ``low``/``high`` of that mean, ``min``/``max``
    seed. The interval is clipped to the values seen at the step (the sweep's ``<metric>_min`` /
    ``_max`` rows; for a checkpoint's ``train/reward``, ``reward_min`` / ``reward_max``) and to the
    values the metric can take (:func:`toolkit._axes.possible_range`): what the band draws and the
    sweep's table says."""
    part = frame[frame["metric"] == metric]
    rows = []
    for step, values in part.groupby("step", sort=True)["value"]:
        mean, half, n = mean_interval(values.to_numpy(dtype=float), level)
        rows.append(
            {"step": step, "n": n, "mean": mean, "half": half, "min": values.min(), "max": values.max()}
        )
    out = pd.DataFrame(rows, columns=["step", "n", "mean", "half", "min", "max"])
    names = (metric, FROM_CHECKPOINT.get(metric, metric))  # train/reward: reward_min, reward_max
    bounds = []
    for suffix, pick in (("_min", "min"), ("_max", "max")):
        seen = next((n + suffix for n in names if (frame["metric"] == n + suffix).any()), None)
        per_step = frame[frame["metric"] == seen].groupby("step")["value"].agg(pick) if seen else None
        bounds.append(None if per_step is None else out["step"].map(per_step).to_numpy(dtype=float))
    out["low"], out["high"] = band_edges(floats(out["mean"]), floats(out["half"]), *bounds, metric=metric)
    return out.drop(columns="half")


def mean_band(
    frame: pd.DataFrame, metric: str, *, by: str | None = None, level: float = 0.95, seeds: bool = True
) -> go.Figure:
    """``metric`` of a seed sweep over steps: per group of ``by`` (e.g. ``config``; one line without),
    the mean over seeds with its ``level`` **Student t-interval** as a band (mean ± t·s/√n, no band
    for one seed), clipped to the values seen at each step (``<metric>_min``/``_max`` rows, as every
    band of :mod:`toolkit.plots`), and each seed as a thin faint line (``seeds=False``: none)."""
    fig = go.Figure()
    colorway = pio.templates["plotly"].layout.colorway
    groups = frame.groupby(by, sort=False) if by is not None else [(None, frame)]
    steps: list[np.ndarray] = []
    values: list[np.ndarray] = []
    counts: set[int] = set()
    for n, (key, part) in enumerate(groups):
        name = str(key[0] if isinstance(key, tuple) else key) if key is not None else metric
        color = colorway[n % len(colorway)]
        stats = seed_steps(part, metric, level)
        if stats.empty:
            continue
        x = floats(stats["step"])
        edges = (floats(stats["low"]), floats(stats["high"]))
        if np.isfinite(edges[0]).any():
            _band(fig, x, edges, color)
        if seeds:
            rows = part[part["metric"] == metric].sort_values("step")
            for seed, runs in rows.groupby("seed", sort=True):
                fig.add_trace(
                    go.Scatter(
                        x=floats(runs["step"]),
                        y=floats(runs["value"]),
                        mode="lines",
                        line={"color": color, "width": 1},
                        opacity=0.35,
                        name=f"{name} seed {seed}",
                        legendgroup=name,
                        showlegend=False,
                        hovertemplate=f"seed {seed}<br>step %{{x}}<br>{metric} %{{y:.4g}}"
                        f"<extra>{name}</extra>",
                    )
                )
        fig.add_trace(
            go.Scatter(
                x=x,
                y=floats(stats["mean"]),
                mode="lines+markers",
                name=name,
                legendgroup=name,
                line={"color": color, "width": 3},
                customdata=stats[["low", "high", "n"]].to_numpy(dtype=float),
                hovertemplate=f"step %{{x}}<br>mean %{{y:.4g}}<br>{level:.0%} CI "
                "[%{customdata[0]:.4g}, %{customdata[1]:.4g}]<br>%{customdata[2]} seeds"
                f"<extra>{name}</extra>",
            )
        )
        counts.update(int(c) for c in stats["n"])
        steps.append(x)
        values += [floats(stats["mean"]), *edges]
    step_axis(fig, np.concatenate(steps) if steps else np.array([]))
    value_axis(fig, np.concatenate(values) if values else np.array([]), metric)
    seeds_text = "/".join(str(c) for c in sorted(counts)) or "no"
    title = f"{metric}: mean over {seeds_text} seeds, {level:.0%} t-interval"
    return layout(fig, title, xaxis_title="step", yaxis_title=metric)
