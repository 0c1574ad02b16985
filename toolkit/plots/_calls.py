"""Figures of chat completions and trace calls: a token probability strip, calls over time and a
trace's call tree."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ._common import PROBABILITY_SCALE, floats, layout, scatter


def logprob_strip(tokens: pd.DataFrame) -> go.Figure:
    """A one-row heat strip of a completion's tokens (:func:`frames.logprobs_frame`), coloured by their
    probability on the fixed scale 0 -> 1 (so two strips compare); the logprob shows on hover."""
    text = [t.replace("\n", "↵") for t in tokens["token"].astype(str)]
    logprobs = floats(tokens["logprob"])
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
    return layout(fig, "Token probabilities", height=180, xaxis_title="token")


def trace_timeseries(calls: pd.DataFrame) -> go.Figure:
    """Latency (top) and cost (bottom) of calls over their start time, from :func:`frames.calls_frame`."""
    calls = calls.sort_values("started_at")
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08)
    x = calls["started_at"].dt.tz_convert("UTC").dt.tz_localize(None).to_numpy()
    for row, (column, label) in enumerate((("latency_ms", "latency (ms)"), ("cost_usd", "cost (USD)")), 1):
        trace = scatter(len(calls), x=x, y=floats(calls[column]), mode="markers", name=label)
        trace.update(text=calls["name"].astype(str).tolist())
        fig.add_trace(trace, row=row, col=1)
        fig.update_yaxes(title_text=label, row=row, col=1)
    return layout(fig, "Calls over time", showlegend=False)


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
    return layout(fig, "Call tree", xaxis_title="ms since trace start", height=max(200, 40 + 26 * len(rows)))
