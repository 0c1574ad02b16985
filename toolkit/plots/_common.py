"""What every figure of :mod:`toolkit.plots` shares: the theme-neutral template, the fixed token
probability scale, WebGL past :data:`WEBGL_THRESHOLD` points, and small helpers."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from plotly.colors import sample_colorscale

WEBGL_THRESHOLD = 2000
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


def floats(series: pd.Series) -> np.ndarray:
    return series.to_numpy(dtype=float, na_value=np.nan)


def layout(fig: go.Figure, title: str, **kw: Any) -> go.Figure:
    fig.update_layout(title=title, template=TEMPLATE, margin={"l": 50, "r": 20, "t": 50, "b": 40}, **kw)
    return fig


def placeholder(text: str, title: str) -> go.Figure:
    """A small figure that only says ``text`` (nothing to plot yet)."""
    fig = go.Figure()
    fig.add_annotation(text=text, showarrow=False, xref="paper", yref="paper")
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return layout(fig, title, height=200)


def reported(df: pd.DataFrame, names: Sequence[str]) -> str | None:
    """The first of ``names`` that is a column of ``df`` holding at least one value."""
    return next((n for n in names if n in df.columns and df[n].notna().any()), None)
