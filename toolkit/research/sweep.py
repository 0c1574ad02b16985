"""Seeds swept: one recipe run over N seeds, its per-step metrics in one long frame, mean ± CI.

A recipe is ``recipe(seed)`` returning either a per-step frame (a ``step`` column and one numeric
column per metric, or the long ``step, metric, value``) or the id of the model it trained, whose
checkpoints' metrics are then read, at each checkpoint's step and under its names (``train/reward``,
``loss/train``, ``loss/entropy``, ...: what ``tk.tracking`` logs and the lineage shows; step N's
``train/reward`` is the mean reward of the rollouts that trained checkpoint N). While it runs, the
seed is the default seed of ``gather`` and the rest (:func:`toolkit.seeding.use_default_seed`).
Intervals are the figure's (:func:`toolkit.plots.seed_steps`): clipped to what was seen and to what
the metric can take, in the table as in the band.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from .. import plots, seeding
from ..client import Client, connect
from ..frames import checkpoints_frame

Recipe = Callable[[int], pd.DataFrame | str]
COLUMNS = ["seed", "step", "metric", "value"]
NOT_METRICS = {"step", "rl_step", "seed", "model_id"}


def long_frame(frame: pd.DataFrame, seed: int) -> pd.DataFrame:
    """A recipe's per-step frame (wide: ``step`` and a column per metric; or long: ``step, metric,
    value``) as the rows ``seed, step, metric, value`` of its numeric values."""
    if "step" not in frame:
        raise ValueError(f"a recipe's frame needs a 'step' column, not {list(frame.columns)}")
    if {"metric", "value"} <= set(frame.columns):
        rows = frame[["step", "metric", "value"]]
    else:
        numeric = [c for c in frame.select_dtypes("number").columns if c not in NOT_METRICS]
        rows = frame.melt(id_vars="step", value_vars=numeric, var_name="metric", value_name="value")
    rows = rows.assign(seed=seed, value=pd.to_numeric(rows["value"], errors="coerce")).dropna(
        subset=["value"]
    )
    return rows[COLUMNS].astype({"seed": "int64", "step": "int64", "metric": "string", "value": "float64"})


def model_frame(client: Client, model_id: str) -> pd.DataFrame:
    """The metrics of a model's checkpoints (every page) by step, under the checkpoints' names."""
    checkpoints = checkpoints_frame(client.models.checkpoints.list(model_id, limit=100))
    return checkpoints.drop(columns=["model_id", "id", "trained", "created_at"], errors="ignore")


@dataclass(repr=False)
class SweepResult:
    """A sweep's ``frame`` (long: ``seed, step, metric, value``, one row per seed, step and metric)
    and, for recipes that return a model id, the ``model_ids`` by seed."""

    frame: pd.DataFrame
    model_ids: dict[int, str] = field(default_factory=dict)

    @classmethod
    def from_models(cls, client: Client, model_ids: Mapping[int, str] | Sequence[str]) -> SweepResult:
        """The sweep made of models already trained, one per seed (a list: seeds 0, 1, ...)."""
        ids = dict(model_ids) if isinstance(model_ids, Mapping) else dict(enumerate(model_ids))
        if not ids:
            raise ValueError("give at least one model id")
        parts = [long_frame(model_frame(client, m), seed) for seed, m in ids.items()]
        return cls(pd.concat(parts, ignore_index=True), ids)

    @property
    def seeds(self) -> list[int]:
        return sorted(int(s) for s in self.frame["seed"].unique())

    @property
    def metrics(self) -> list[str]:
        return sorted(str(m) for m in self.frame["metric"].unique())

    def final_step(self, metric: str) -> int:
        """The last step that every seed reported ``metric`` at."""
        part = self.frame[self.frame["metric"] == metric]
        if part.empty:
            raise KeyError(f"no {metric!r} in this sweep; it has {self.metrics}")
        return int(part.groupby("seed")["step"].max().min())

    def summary(self, metric: str, step: int | None = None, level: float = 0.95) -> dict[str, Any]:
        """``metric`` at ``step`` (default: :meth:`final_step`) over the seeds: ``n``, ``mean``,
        ``std`` (over seeds), the ``level`` t-interval ``ci_low``/``ci_high`` (NaN for one seed),
        clipped as :meth:`figure`'s band is (:func:`toolkit.plots.seed_steps`)."""
        step = self.final_step(metric) if step is None else step
        stats = {int(r["step"]): r for r in plots.seed_steps(self.frame, metric, level).to_dict("records")}
        if step not in stats:
            raise KeyError(f"no {metric!r} at step {step}; it has steps {sorted(stats)}")
        row = stats[step]
        part = self.frame[(self.frame["metric"] == metric) & (self.frame["step"] == step)]["value"]
        n = int(row["n"])
        std = float(part.std(ddof=1)) if n > 1 else float("nan")
        return {"metric": metric, "step": step, "n": n, "mean": float(row["mean"]), "std": std,
                "ci_low": float(row["low"]), "ci_high": float(row["high"]), "level": level}  # fmt: skip

    def table(self, metrics: Iterable[str] | None = None, level: float = 0.95) -> pd.DataFrame:
        """:meth:`summary` of each metric (default: all) at its final step, one row each."""
        return pd.DataFrame([self.summary(m, level=level) for m in (metrics or self.metrics)])

    def figure(self, metric: str, level: float = 0.95) -> go.Figure:
        """:func:`toolkit.plots.mean_band` of ``metric``: the mean over seeds with its t-interval."""
        return plots.mean_band(self.frame, metric, level=level)

    def __repr__(self) -> str:
        return f"SweepResult(seeds {self.seeds}, {len(self.metrics)} metrics, {len(self.frame)} rows)"

    def _repr_html_(self) -> str:
        title = f"<b>Sweep over seeds {self.seeds}</b> (95% t-interval of the mean, final step)"
        return title + str(self.table().to_html(index=False, float_format="{:.4g}".format))


def combine(sweeps: Mapping[str, SweepResult]) -> pd.DataFrame:
    """The frames of several sweeps (by config name) in one, with a ``config`` column first."""
    parts = [s.frame.assign(config=name) for name, s in sweeps.items()]
    frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["config", *COLUMNS])
    return frame[["config", *COLUMNS]]


def mean_ci_table(
    sweeps: Mapping[str, SweepResult], metric: str, step: int | None = None, level: float = 0.95
) -> pd.DataFrame:
    """One row per config: ``metric`` at ``step`` (default: the last step every seed of every config
    has) as ``n``, ``mean``, ``std``, ``ci_low``, ``ci_high`` (clipped as the band is) and the text
    ``mean [low, high]`` (``n/a`` for one seed)."""
    if step is None:
        step = min(s.final_step(metric) for s in sweeps.values())
    rows = [{"config": name, **s.summary(metric, step, level)} for name, s in sweeps.items()]
    table = pd.DataFrame(rows)
    table[ci_column(level)] = [
        f"{mean:.3g} [n/a]" if math.isnan(low) else f"{mean:.3g} [{low:.3g}, {high:.3g}]"
        for mean, low, high in zip(table["mean"], table["ci_low"], table["ci_high"], strict=True)
    ]
    return table


def ci_column(level: float) -> str:
    """The text column of :func:`mean_ci_table`: ``mean [95% CI]``."""
    return f"mean [{level:.0%} CI]"


def sweep(recipe: Recipe, seeds: Sequence[int], *, client: Client | None = None) -> SweepResult:
    """Run ``recipe(seed)`` for each seed in turn and gather what each returned (a per-step frame, or
    a model id whose checkpoints are read through ``client``, default :func:`toolkit.connect`)."""
    if not seeds:
        raise ValueError("give at least one seed")
    parts: list[pd.DataFrame] = []
    model_ids: dict[int, str] = {}
    for seed in seeds:
        with seeding.use_default_seed(seed):
            out = recipe(seed)
        if isinstance(out, str):
            client = connect() if client is None else client
            model_ids[seed] = out
            out = model_frame(client, out)
        if not isinstance(out, pd.DataFrame):
            raise TypeError(f"a recipe returns a per-step DataFrame or a model id, not {type(out).__name__}")
        parts.append(long_frame(out, seed))
    return SweepResult(pd.concat(parts, ignore_index=True), model_ids)
