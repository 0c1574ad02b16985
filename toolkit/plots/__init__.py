"""Plotly figures of the frames of :mod:`toolkit.frames`: pure functions ``frame -> go.Figure``.

Line and marker traces switch to WebGL (``Scattergl``) past :data:`WEBGL_THRESHOLD` points so large
runs stay responsive. Figures have transparent backgrounds and grey text and grid (:data:`TEMPLATE`),
so they read on JupyterLab's light and dark themes alike. Token logprobs are coloured on one fixed
scale of probability (:func:`probability_color`), so strips of different models and cells compare.

Training progress in :mod:`._training`, chat and trace calls in :mod:`._calls`, RL health and seed
bands in :mod:`._bands`, the checkpoint tree in :mod:`._lineage`; the axis rules (:mod:`toolkit._axes`)
and :func:`~toolkit.health.health_warnings` are here too.
"""

from .._axes import band_edges, step_axis, value_axis
from ..health import HealthWarning, health_warnings
from ._bands import HEALTH_PANELS, WARNING_COLOR, mean_band, run_health, runs_overlay, seed_steps
from ._calls import call_tree, logprob_strip, trace_timeseries
from ._common import (
    GRID,
    INK,
    PROBABILITY_SCALE,
    TEMPLATE,
    TRANSPARENT,
    WEBGL_THRESHOLD,
    probability_color,
    reported,
    scatter,
)
from ._lineage import HOVER_KEYS, LINEAGE_SYMBOLS, lineage, lineage_hover, lineage_tree
from ._training import (
    CURVES,
    LINE_STYLES,
    LOSS_KEYS,
    REWARD_KEYS,
    checkpoint_metrics,
    reward_distribution,
    step_lines,
    training_curves,
)

__all__ = [
    "CURVES",
    "GRID",
    "HEALTH_PANELS",
    "HOVER_KEYS",
    "INK",
    "LINEAGE_SYMBOLS",
    "LINE_STYLES",
    "LOSS_KEYS",
    "PROBABILITY_SCALE",
    "REWARD_KEYS",
    "TEMPLATE",
    "TRANSPARENT",
    "WARNING_COLOR",
    "WEBGL_THRESHOLD",
    "HealthWarning",
    "band_edges",
    "call_tree",
    "checkpoint_metrics",
    "health_warnings",
    "lineage",
    "lineage_hover",
    "lineage_tree",
    "logprob_strip",
    "mean_band",
    "probability_color",
    "reported",
    "reward_distribution",
    "run_health",
    "runs_overlay",
    "scatter",
    "seed_steps",
    "step_axis",
    "step_lines",
    "trace_timeseries",
    "training_curves",
    "value_axis",
]
