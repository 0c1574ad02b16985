"""The checkpoint lineage figure: a tree of checkpoints over steps, one row per branch."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from ..lineage import lineage_frame
from ._common import INK, layout

if TYPE_CHECKING:
    from ..client import Client

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


def _shown(value: Any) -> str:
    """A value as a hover shows it: a whole number in full (a seed or a count copies as it is), any
    other float to 4 significant digits."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _listed(title: str, values: Mapping[str, Any], first: Collection[str] = ()) -> str:
    """``title``: up to :data:`HOVER_KEYS` ``key=value`` lines, the keys in ``first`` first, then
    the rest (bookkeeping ``data/*`` metrics last)."""
    keys = sorted(values, key=lambda k: (k not in first, k.startswith("data/"), k))
    items = [f"{k}={_shown(values[k])}" for k in keys]
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
                text=["base" if r["kind"] == "base" else _shown(r["step"]) for r in rows],
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
    return layout(fig, title, xaxis_title="step", height=200 + 50 * len(lane_rows), hovermode="closest")


def lineage(client: Client, *model_ids: str) -> go.Figure:
    """The checkpoint tree of ``model_ids`` (:func:`lineage_tree` of :func:`toolkit.lineage.lineage_frame`):
    a branch wherever a job started from an earlier step, and where runs leave a shared base."""
    if not model_ids:
        raise ValueError("give at least one model id")
    return lineage_tree(lineage_frame(client, model_ids))
