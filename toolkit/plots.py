"""Plotly figures of the frames of :mod:`toolkit.frames`: pure functions ``frame -> go.Figure``.

Line and marker traces switch to WebGL (``Scattergl``) past :data:`WEBGL_THRESHOLD` points so large
runs stay responsive. Figures have transparent backgrounds and grey text and grid (:data:`TEMPLATE`),
so they read on JupyterLab's light and dark themes alike. Token logprobs are coloured on one fixed
scale of probability (:func:`probability_color`), so strips of different models and cells compare.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from plotly.colors import sample_colorscale
from plotly.subplots import make_subplots

from ._axes import band_edges, step_axis, value_axis  # tk.plots.step_axis and the rest too
from ._stats import mean_interval
from .health import HealthWarning, fetch_health, health_warnings  # tk.plots.health_warnings too
from .lineage import lineage_frame

if TYPE_CHECKING:
    from .client import Client

WEBGL_THRESHOLD = 2000
LOSS_KEYS = ("loss", "loss/train", "policy_loss")
REWARD_KEYS = ("reward", "train/reward")
CURVES = (("loss", LOSS_KEYS), ("reward", REWARD_KEYS))  # a panel each, drawn when the job reports it
INK = "#7a7a7a"  # about 4.3:1 contrast on both JupyterLab backgrounds (light: white, dark: #111)
GRID = "rgba(128,128,128,0.3)"
TRANSPARENT = "rgba(0,0,0,0)"
# Token probability 0 -> 1, red -> yellow -> green; light enough for black text on every colour.
PROBABILITY_SCALE = [
    [0.0, "#f46d43"],
    [0.25, "#fdae61"],
    [0.5, "#fee08b"],
    [0.75, "#a6d96a"],
    [1.0, "#66bd63"],
]


def _template() -> go.layout.Template:
    template = go.layout.Template(pio.templates["plotly_white"])
    template.layout.update(
        paper_bgcolor=TRANSPARENT,
        plot_bgcolor=TRANSPARENT,
        font_color=INK,
        annotationdefaults_arrowcolor=INK,
    )
    for axis in (template.layout.xaxis, template.layout.yaxis):
        axis.update(gridcolor=GRID, linecolor=GRID, zerolinecolor=GRID)
    return template


TEMPLATE = _template()


def probability_color(logprob: float) -> str:
    """The colour of a token of this logprob on the fixed probability scale (``rgb(r, g, b)``)."""
    p = min(1.0, max(0.0, math.exp(logprob))) if math.isfinite(logprob) else 0.0
    return str(sample_colorscale(PROBABILITY_SCALE, [p])[0])


def scatter(n: int, **kw: Any) -> go.Scatter | go.Scattergl:
    """A line/marker trace for ``n`` points: WebGL past the threshold."""
    return go.Scattergl(**kw) if n > WEBGL_THRESHOLD else go.Scatter(**kw)


def _floats(series: pd.Series) -> np.ndarray:
    return series.to_numpy(dtype=float, na_value=np.nan)


def _layout(fig: go.Figure, title: str, **kw: Any) -> go.Figure:
    fig.update_layout(title=title, template=TEMPLATE, margin={"l": 50, "r": 20, "t": 50, "b": 40}, **kw)
    return fig


LINE_STYLES = (("solid", "circle"), ("dash", "diamond"), ("dot", "square"), ("dashdot", "x"))


def step_lines(
    frame: pd.DataFrame, y: Sequence[str], x: str = "rl_step", title: str = "", yaxis_title: str = ""
) -> go.Figure:
    """Columns ``y`` of a per-step frame (a notebook's history of RL steps) as lines over ``x``:
    whole-step ticks, a [0, 1] axis when every value is a share or mean reward in it, and each line in
    its own dash and marker, so one that lies on another stays visible."""
    fig = go.Figure()
    steps = _floats(frame[x])
    for n, column in enumerate(y):
        style = LINE_STYLES[n % len(LINE_STYLES)]
        fig.add_trace(
            scatter(
                len(frame),
                x=steps,
                y=_floats(frame[column]),
                mode="lines+markers",
                name=column,
                line={"dash": style[0], "width": 2 + (len(y) - 1 - n)},  # the first lines widest
                marker={"symbol": style[1], "size": 7 + 2 * (len(y) - 1 - n)},
            )
        )
    step_axis(fig, steps)
    values = np.concatenate([_floats(frame[c]) for c in y]) if y else np.array([])
    value_axis(fig, values, "score")  # [0, 1] when every value lies there (mean rewards, shares)
    return _layout(fig, title, xaxis_title=x.replace("_", " "), yaxis_title=yaxis_title)


def reported(df: pd.DataFrame, names: Sequence[str]) -> str | None:
    """The first of ``names`` that is a column of ``df`` holding at least one value."""
    return next((n for n in names if n in df.columns and df[n].notna().any()), None)


def training_curves(events: pd.DataFrame) -> go.Figure:
    """Loss and reward over gradient steps (:func:`toolkit.frames.events_frame`), one panel each, stacked;
    only the metrics the job reports get a panel (an SFT job has no reward)."""
    steps = events[events["type"] == "gradient_step"] if "type" in events else events
    panels = [(label, column) for label, keys in CURVES if (column := reported(steps, keys))]
    if not panels:
        fig = go.Figure()
        fig.add_annotation(text="no gradient step yet", showarrow=False, xref="paper", yref="paper")
        fig.update_xaxes(visible=False)
        fig.update_yaxes(visible=False)
        return _layout(fig, "Training", height=200)
    fig = make_subplots(rows=len(panels), cols=1, shared_xaxes=True, vertical_spacing=0.08)
    x = _floats(steps["step"])
    for row, (label, column) in enumerate(panels, start=1):
        y = _floats(steps[column])
        fig.add_trace(scatter(len(x), x=x, y=y, mode="lines+markers", name=label), row=row, col=1)
        fig.update_yaxes(title_text=label, row=row, col=1)
        value_axis(fig, y, column, row=row, col=1)
    step_axis(fig, x)
    fig.update_xaxes(title_text="gradient step", row=len(panels), col=1)
    return _layout(fig, "Training", showlegend=False, height=220 + 160 * len(panels))


def checkpoint_metrics(checkpoints: pd.DataFrame, metric: str, by: str = "model_id") -> go.Figure:
    """One metric over checkpoint steps, one line per model (``by`` column) overlaid."""
    fig = go.Figure()
    groups = checkpoints.groupby(by, dropna=False, sort=False) if by in checkpoints else [(None, checkpoints)]
    for key, part in groups:
        part = part.sort_values("step")
        y = _floats(part[metric]) if metric in part else np.full(len(part), np.nan)
        name = str(key[0] if isinstance(key, tuple) else key) if key is not None else metric
        fig.add_trace(scatter(len(part), x=_floats(part["step"]), y=y, mode="lines+markers", name=name))
    step_axis(fig, _floats(checkpoints["step"]))
    if metric != "step" and metric in checkpoints:
        value_axis(fig, _floats(checkpoints[metric]), metric)
    return _layout(fig, metric, xaxis_title="step", yaxis_title=metric)


def reward_distribution(trajectories: pd.DataFrame, by: str = "group") -> go.Figure:
    """Rewards of each group as a box with every point, from :func:`toolkit.frames.groups_frame`."""
    fig = go.Figure()
    for key, part in trajectories.groupby(by, sort=True):
        fig.add_trace(go.Box(y=_floats(part["reward"]), name=str(key), boxpoints="all", jitter=0.3))
    return _layout(fig, "Reward per group", xaxis_title=by, yaxis_title="reward", showlegend=False)


def logprob_strip(tokens: pd.DataFrame) -> go.Figure:
    """A one-row heat strip of a completion's tokens (:func:`frames.logprobs_frame`), coloured by their
    probability on the fixed scale 0 -> 1 (so two strips compare); the logprob shows on hover."""
    text = [t.replace("\n", "↵") for t in tokens["token"].astype(str)]
    logprobs = _floats(tokens["logprob"])
    fig = go.Figure(
        go.Heatmap(
            z=[np.exp(logprobs)],
            customdata=[logprobs],
            text=[text],
            texttemplate="%{text}",
            textfont={"color": "black"},
            hovertemplate="%{text}<br>logprob %{customdata:.3f}, probability %{z:.3f}<extra></extra>",
            colorscale=PROBABILITY_SCALE,
            zauto=False,
            zmin=0.0,
            zmax=1.0,
            colorbar={"title": {"text": "probability"}},
        )
    )
    fig.update_yaxes(visible=False)
    return _layout(fig, "Token probabilities", height=180, xaxis_title="token")


def trace_timeseries(calls: pd.DataFrame) -> go.Figure:
    """Latency (top) and cost (bottom) of calls over their start time, from :func:`frames.calls_frame`."""
    calls = calls.sort_values("started_at")
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08)
    x = calls["started_at"].dt.tz_convert("UTC").dt.tz_localize(None).to_numpy()
    for row, (column, label) in enumerate((("latency_ms", "latency (ms)"), ("cost_usd", "cost (USD)")), 1):
        trace = scatter(len(calls), x=x, y=_floats(calls[column]), mode="markers", name=label)
        trace.update(text=calls["name"].astype(str).tolist())
        fig.add_trace(trace, row=row, col=1)
        fig.update_yaxes(title_text=label, row=row, col=1)
    return _layout(fig, "Calls over time", showlegend=False)


def _tree_order(calls: pd.DataFrame) -> list[tuple[int, int]]:
    """(row position, depth) of each call, depth-first from the roots, children by start time."""
    ids = calls["id"].tolist()
    known = set(ids)
    children: dict[object, list[int]] = {}
    for pos, parent in enumerate(calls["parent_id"].tolist()):
        key = parent if isinstance(parent, str) and parent in known else None
        children.setdefault(key, []).append(pos)
    order: list[tuple[int, int]] = []
    stack = [(pos, 0) for pos in reversed(children.get(None, []))]
    while stack:
        pos, depth = stack.pop()
        order.append((pos, depth))
        stack.extend((c, depth + 1) for c in reversed(children.get(ids[pos], [])))
    return order


def call_tree(calls: pd.DataFrame) -> go.Figure:
    """The calls of one trace as a waterfall: one bar per call from its start to its end, nested by depth."""
    calls = calls.sort_values("started_at").reset_index(drop=True)
    order = _tree_order(calls)
    t0 = calls["started_at"].min()
    start = ((calls["started_at"] - t0).dt.total_seconds() * 1000).to_numpy(dtype=float)
    end = calls["ended_at"].fillna(calls["started_at"].max())
    duration = ((end - calls["started_at"]).dt.total_seconds() * 1000).to_numpy(dtype=float)
    labels = ["\u00a0\u00a0" * depth + str(calls["name"].iloc[pos]) for pos, depth in order]
    rows = [pos for pos, _ in order]
    colors = ["#d62728" if calls["status"].iloc[p] == "error" else "#1f77b4" for p in rows]
    fig = go.Figure(
        go.Bar(
            base=start[rows],
            x=np.maximum(duration[rows], 0.5),
            y=list(range(len(rows))),
            orientation="h",
            marker_color=colors,
            customdata=calls["id"].iloc[rows].tolist(),
            text=labels,
            hovertemplate="%{text}<br>start %{base:.0f} ms, %{x:.0f} ms<extra></extra>",
            textposition="none",
        )
    )
    fig.update_yaxes(autorange="reversed", tickvals=list(range(len(rows))), ticktext=labels)
    return _layout(fig, "Call tree", xaxis_title="ms since trace start", height=max(200, 40 + 26 * len(rows)))


# ----------------------------------------------------------------------------- RL health

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
        fig = go.Figure()
        fig.add_annotation(text="no RL step metrics yet", showarrow=False, xref="paper", yref="paper")
        fig.update_xaxes(visible=False)
        fig.update_yaxes(visible=False)
        return _layout(fig, "RL health", height=200)
    cols = 2
    rows = math.ceil(len(panels) / cols)
    titles = [t for t, _ in panels]
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles, vertical_spacing=0.3 / rows + 0.04)
    x = _floats(frame["step"]) if "step" in frame else np.arange(len(frame), dtype=float)
    where: dict[str, tuple[int, int]] = {}
    for i, (_, columns) in enumerate(panels):
        cell = {"row": i // cols + 1, "col": i % cols + 1}
        for n, (column, label, style) in enumerate(columns):
            where.setdefault(column, (cell["row"], cell["col"]))
            color = pio.templates["plotly"].layout.colorway[n % 10]
            y = _floats(frame[column])
            if column == "reward" and reported(frame, ("reward_std",)):
                _band(fig, x, _bounded_band(frame, "reward", "reward_std"), color, **cell)
            line = {"color": color, "dash": None if style == "line" else style}
            fig.add_trace(scatter(len(x), x=x, y=y, mode="lines+markers", name=label, line=line), **cell)
        value_axis(fig, np.concatenate([_floats(frame[c]) for c, _, _ in columns]), columns[0][0], **cell)
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
    return _layout(fig, title, showlegend=False, height=180 + 210 * rows)


def _bounded_band(frame: pd.DataFrame, metric: str, band: str) -> tuple[np.ndarray, np.ndarray]:
    """``metric ± band`` of a frame, clipped to its ``<metric>_min``/``<metric>_max`` columns if any."""
    bounds = [_floats(frame[c]) if c in frame else None for c in (f"{metric}_min", f"{metric}_max")]
    return band_edges(_floats(frame[metric]), np.nan_to_num(_floats(frame[band])), *bounds)


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
        x = _floats(part["step"]) if "step" in part else np.arange(len(part), dtype=float)
        y = _floats(part[metric]) if metric in part else np.full(len(part), np.nan)
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
    return _layout(fig, title, xaxis_title=" / ".join(sorted(xs)) or "step", yaxis_title=metric)


# ----------------------------------------------------------------------------- seeds


def seed_steps(frame: pd.DataFrame, metric: str, level: float = 0.95) -> pd.DataFrame:
    """Per step of a long sweep frame (``seed, step, metric, value``; :class:`toolkit.research.SweepResult`):
    ``n`` seeds, their ``mean``, the ``level`` t-interval ``low``/``high`` of that mean (clipped to the
    values seen at the step, ``<metric>_min``/``_max`` when the sweep has them), ``min``/``max`` seed."""
    part = frame[frame["metric"] == metric]
    rows = []
    for step, values in part.groupby("step", sort=True)["value"]:
        mean, half, n = mean_interval(values.to_numpy(dtype=float), level)
        rows.append(
            {"step": step, "n": n, "mean": mean, "half": half, "min": values.min(), "max": values.max()}
        )
    out = pd.DataFrame(rows, columns=["step", "n", "mean", "half", "min", "max"])
    bounds = []
    for suffix, pick in (("_min", "min"), ("_max", "max")):
        seen = frame[frame["metric"] == metric + suffix].groupby("step")["value"].agg(pick)
        bounds.append(out["step"].map(seen).to_numpy(dtype=float) if len(seen) else None)
    out["low"], out["high"] = band_edges(_floats(out["mean"]), _floats(out["half"]), *bounds)
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
        x = _floats(stats["step"])
        edges = (_floats(stats["low"]), _floats(stats["high"]))
        if np.isfinite(edges[0]).any():
            _band(fig, x, edges, color)
        if seeds:
            rows = part[part["metric"] == metric].sort_values("step")
            for seed, runs in rows.groupby("seed", sort=True):
                fig.add_trace(
                    go.Scatter(
                        x=_floats(runs["step"]),
                        y=_floats(runs["value"]),
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
                y=_floats(stats["mean"]),
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
        values += [_floats(stats["mean"]), *edges]
    step_axis(fig, np.concatenate(steps) if steps else np.array([]))
    value_axis(fig, np.concatenate(values) if values else np.array([]), metric)
    seeds_text = "/".join(str(c) for c in sorted(counts)) or "no"
    title = f"{metric}: mean over {seeds_text} seeds, {level:.0%} t-interval"
    return _layout(fig, title, xaxis_title="step", yaxis_title=metric)


# ----------------------------------------------------------------------------- lineage

HOVER_KEYS = 12  # config keys and metrics listed in a node's hover text
LINEAGE_SYMBOLS = {"base": "diamond", "deleted": "x-thin-open"}


def _lanes(tree: pd.DataFrame) -> dict[str, int]:
    """A row of the figure for each node: a child continues its parent's row, its later siblings
    (branches) open rows of their own, each base starts one."""
    children: dict[Any, list[str]] = {}
    for node, parent in zip(tree["node"], tree["parent"], strict=True):
        children.setdefault(parent if isinstance(parent, str) else None, []).append(node)
    lanes: dict[str, int] = {}
    free = 0
    stack: list[tuple[str, int | None]] = [(root, None) for root in reversed(children.get(None, []))]
    while stack:
        node, lane = stack.pop()
        if lane is None:
            lane, free = free, free + 1
        lanes[node] = lane
        kids = children.get(node, [])
        stack += [(kid, None) for kid in reversed(kids[1:])]
        if kids:
            stack.append((kids[0], lane))
    return lanes


def _listed(title: str, values: Mapping[str, Any], first: Collection[str] = ()) -> str:
    """``title``: up to :data:`HOVER_KEYS` ``key=value`` lines, the keys in ``first`` first, then
    the rest (bookkeeping ``data/*`` metrics last)."""
    keys = sorted(values, key=lambda k: (k not in first, k.startswith("data/"), k))
    items = [f"{k}={values[k]:.4g}" if isinstance(values[k], float) else f"{k}={values[k]}" for k in keys]
    more = f" (+{len(items) - HOVER_KEYS} more)" if len(items) > HOVER_KEYS else ""
    return f"<br><i>{title}</i>: " + "<br>  ".join(items[:HOVER_KEYS]) + more if items else ""


def lineage_hover(row: Mapping[str, Any], first: Collection[str] = ()) -> str:
    """A node's hover text: its name, the job that made it, its seed and digest, config (the keys in
    ``first`` first) and metrics."""
    text = f"<b>{row['label']}</b>"
    if row["kind"] == "deleted":
        return text + "<br>deleted: a later step was trained from it"
    if isinstance(row.get("job_id"), str):
        text += f"<br>job {row['job_id'][:8]} ({row['job_kind']})"
    elif row["kind"] == "checkpoint":
        text += "<br>no job (the base weights)" if row["step"] == 0 else "<br>no job recorded"
    if row.get("trained") is False:
        text += "<br>trained nothing (the weights of its parent)"
    if row.get("seed") is not None and not pd.isna(row["seed"]):
        text += f"<br>seed {row['seed']}"
    if isinstance(row.get("digest"), str):
        text += f"<br>digest {row['digest'][:16]}…"
    metrics = row["metrics"] if isinstance(row.get("metrics"), dict) else {}
    config = row["config"] if isinstance(row.get("config"), dict) else {}
    scores = [k for k in metrics if k.split("/")[0] in ("train", "val", "test")]  # rewards before the rest
    return text + _listed("config", config, first) + _listed("metrics", metrics, scores)


def lineage_tree(tree: pd.DataFrame, title: str = "Checkpoint lineage") -> go.Figure:
    """The figure of a :func:`toolkit.lineage.lineage_frame`: each node at its step (a base at the
    left), one row per branch, an edge from each parent; a model's checkpoints in its colour (open
    markers: trained nothing), bases as grey diamonds, deleted steps as crosses; the hover says each
    node's job, seed, digest, config (the keys whose values differ between the jobs first) and metrics."""
    lanes = _lanes(tree)
    records: list[dict[str, Any]] = tree.to_dict("records")  # type: ignore[assignment]
    configs = [r["config"] for r in records if isinstance(r.get("config"), dict)]
    varying = {k for c in configs for k in c if len({repr(o.get(k)) for o in configs}) > 1}
    x = {r["node"]: (-1.0 if r["kind"] == "base" else float(r["step"])) for r in records}
    fig = go.Figure()
    edge_x: list[float | None] = []
    edge_y: list[float | None] = []
    for node, parent in zip(tree["node"], tree["parent"], strict=True):
        if isinstance(parent, str) and parent in lanes:
            edge_x += [x[parent], x[node], None]
            edge_y += [lanes[parent], lanes[node], None]
    edges = go.Scatter(x=edge_x, y=edge_y, mode="lines", line={"color": INK, "width": 1.5}, hoverinfo="skip")
    fig.add_trace(edges.update(showlegend=False))
    colorway = pio.templates["plotly"].layout.colorway
    is_base = tree["kind"] == "base"
    parts = [("base models", tree[is_base])] + [
        (str(part["model"].iloc[0]), part) for _, part in tree[~is_base].groupby("model_id", sort=False)
    ]
    for n, (name, part) in enumerate(parts):
        rows: list[dict[str, Any]] = part.to_dict("records")  # type: ignore[assignment]
        if not rows:
            continue
        symbols = [
            LINEAGE_SYMBOLS.get(r["kind"], "circle-open" if r.get("trained") is False else "circle")
            for r in rows
        ]
        color = INK if n == 0 else colorway[(n - 1) % len(colorway)]
        fig.add_trace(
            go.Scatter(
                x=[x[r["node"]] for r in rows],
                y=[lanes[r["node"]] for r in rows],
                mode="markers+text",
                name=name,
                text=["base" if r["kind"] == "base" else str(r["step"]) for r in rows],
                textposition="top center",
                marker={"size": 12, "symbol": symbols, "color": color, "line": {"width": 2, "color": color}},
                hovertext=[lineage_hover(r, varying) for r in rows],
                hoverinfo="text",
                customdata=[r["node"] for r in rows],
            )
        )
    steps = sorted({v for v in x.values() if v >= 0})
    shown = steps if len(steps) <= 13 else steps[:: math.ceil(len(steps) / 12)]
    ticks = [-1.0, *shown]
    fig.update_xaxes(
        tickvals=ticks, ticktext=["base", *(str(int(s)) for s in shown)], range=[-1.5, ticks[-1] + 0.5]
    )
    names: dict[int, str] = {}
    for row in sorted(records, key=lambda r: r["kind"] == "base"):
        names.setdefault(
            lanes[row["node"]], str(row["model"])
        )  # a lane is named after its model, else its base
    lane_rows = sorted(names)
    fig.update_yaxes(
        tickvals=lane_rows,
        ticktext=[names[v] for v in lane_rows],
        range=[max(lane_rows, default=0) + 0.6, -0.6],
    )
    fig.update_yaxes(showgrid=False, zeroline=False)
    return _layout(fig, title, xaxis_title="step", height=200 + 50 * len(lane_rows), hovermode="closest")


def lineage(client: Client, *model_ids: str) -> go.Figure:
    """The checkpoint tree of ``model_ids`` (:func:`lineage_tree` of :func:`toolkit.lineage.lineage_frame`):
    a branch wherever a job started from an earlier step, and where runs leave a shared base."""
    if not model_ids:
        raise ValueError("give at least one model id")
    return lineage_tree(lineage_frame(client, model_ids))
