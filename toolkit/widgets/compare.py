"""RunCompare: 2-4 runs (models or jobs) side by side: their configs as a diff table, reward curves with
``mean ± std`` bands, any metric overlaid by step, and their checkpoints at one step in a chat compare.
Or 2-4 configs, each run over several seeds: their curves as mean with a t-interval band, and a
table of mean ± CI per config."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ipywidgets as w
import pandas as pd
import plotly.graph_objects as go
from traitlets import Int, List, Unicode

from .. import _theme, health, plots
from ..client import Client
from ..frames import checkpoints_frame, events_frame, flatten
from ..research.sweep import SweepResult, ci_column, combine, mean_ci_table
from ..types.training import Model
from ._base import ToolkitWidget
from ._common import FigureBox, StatusLine, button, frame_html
from .chat import ChatCompare
from .checkpoints import MetricPicker, checkpoint_name

MIN_RUNS, MAX_RUNS = 2, 4
MISSING = "—"
HIDDEN = {"step", "rl_step", "model_id"}  # columns that are not metrics
REWARD = "reward"  # the metric of the first figure and the default one of the second


def _named(metric: str, metrics: list[str]) -> str:
    """``metric`` as ``metrics`` name it: a health name (``reward``) stands for its checkpoint name
    (``train/reward``) where only that one is there, as in a sweep's metrics."""
    if metric in metrics:
        return metric
    return next((c for c, h in health.FROM_CHECKPOINT.items() if h == metric and c in metrics), metric)


def config_diff(configs: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """One row per config key whose value differs between the runs (a missing key counts as ``—``),
    one column per run; the key is the index."""
    keys = sorted({k for config in configs.values() for k in config})
    rows = {k: {name: config.get(k, MISSING) for name, config in configs.items()} for k in keys}
    differing = {k: row for k, row in rows.items() if len({repr(v) for v in row.values()}) > 1}
    return pd.DataFrame.from_dict(differing, orient="index", columns=list(configs)).rename_axis("key")


@dataclass
class Run:
    """One compared run: its label, model, job (None for a whole model), health frame, flat config and
    the step its latest checkpoint has."""

    name: str
    model: Model
    job_id: str | None
    frame: pd.DataFrame
    config: dict[str, Any]
    latest_step: int


class RunCompare(ToolkitWidget):
    """Compare 2-4 runs, each a model (its RL steps, from its checkpoints) or a job (its gradient steps);
    or 2-4 ``configs``, each a :class:`~toolkit.research.SweepResult` or the model ids of its seeds.

    :meth:`start` (or the first display) loads them: the config diff (the model's base, LoRA settings
    and the resolved config of its latest RL job; only the keys that differ), reward with ``± reward_std``
    bands, the ``metric`` overlaid. :meth:`chat` opens a :class:`ChatCompare` of the runs' checkpoints at
    ``step`` (default: the latest step every run has) on each of the ``prompts``.

    With ``configs``, the figures draw each config's mean over its seeds with a ``level`` Student
    t-interval band (:func:`toolkit.plots.mean_band`), and :attr:`seed_summary` holds the metric's
    mean ± CI per config at ``ci_step`` (default: the last step every seed has); the config diff and
    the chat use the first seed's model of each config (when the configs are models).

    State traits: ``names`` (the runs' or configs' labels) and ``chat_step`` (the step last chatted with).
    """

    names = List(Unicode())
    chat_step = Int(None, allow_none=True)

    def __init__(
        self,
        client: Client,
        models: Sequence[str] = (),
        jobs: Sequence[str] = (),
        *,
        metric: str = REWARD,
        prompts: Sequence[str] = ("Say hi",),
        max_tokens: int = 32,
        configs: Mapping[str, SweepResult | Sequence[str]] | None = None,
        ci_step: int | None = None,
        level: float = 0.95,
    ) -> None:
        self.client = client
        self.model_ids, self.job_ids = list(models), list(jobs)
        self.configs = dict(configs or {})
        self.sweeps: dict[str, SweepResult] = {}
        self.ci_step, self.level = ci_step, level
        self.seed_summary = pd.DataFrame()
        self.seed_table = w.HTML()
        self.runs: list[Run] = []
        self._loading = False
        self.diff = config_diff({})
        self.metric = MetricPicker(description="metric", options=[])
        self.metric.value = metric
        self.metric.observe(lambda _: self._plot_metric(), "value")
        self.step = w.BoundedIntText(value=0, min=0, max=10**9, description="step")
        self.prompts = w.Textarea(
            value="\n".join(prompts), description="prompts", layout=w.Layout(width="60%")
        )
        self.max_tokens = max_tokens
        self.diff_table = w.HTML()
        self.reward_metric = REWARD  # as the compared runs name it (a sweep's: train/reward)
        self.reward_plot = FigureBox(plots.runs_overlay({}, REWARD))
        self.metric_plot = FigureBox(plots.runs_overlay({}, metric))
        self.chat_area = w.VBox()
        self.status_line = StatusLine()
        super().__init__(
            [
                self.status_line,
                w.HTML("<b>Config differences</b>"),
                self.diff_table,
                self.seed_table,
                self.reward_plot,
                self.metric,
                self.metric_plot,
                w.HTML("<b>Checkpoints at one step</b> (one prompt per line)"),
                w.HBox(
                    [self.step, self.prompts, button("Chat", self.action("chat", self.chat), icon="comments")]
                ),
                self.chat_area,
            ]
        )

    # ------------------------------------------------------------------ logic

    def load(self) -> None:
        """Read every run (or config) and draw the diff table and the figures."""
        if self.configs and (self.model_ids or self.job_ids):
            raise ValueError("compare configs (over seeds) or runs (models, jobs), not both")
        count = len(self.configs) or len(self.model_ids) + len(self.job_ids)
        if not MIN_RUNS <= count <= MAX_RUNS:
            what = "configs" if self.configs else "runs (models or jobs)"
            raise ValueError(f"compare {MIN_RUNS} to {MAX_RUNS} {what}, not {count}")
        if self.configs:
            self.sweeps = {
                name: v if isinstance(v, SweepResult) else SweepResult.from_models(self.client, v)
                for name, v in self.configs.items()
            }
            runs = [self._seeded_run(name, s) for name, s in self.sweeps.items() if s.model_ids]
        else:
            runs = [self._model_run(m) for m in self.model_ids] + [self._job_run(j) for j in self.job_ids]
        seen: dict[str, int] = {}
        for run in runs:  # the same name twice: tell them apart by id
            seen[run.name] = seen.get(run.name, 0) + 1
        for run in runs:
            if seen[run.name] > 1:
                run.name = f"{run.name} ({(run.job_id or run.model.id)[:8]})"
        self.runs = runs
        self.diff = config_diff({r.name: r.config for r in runs})
        self.diff_table.value = frame_html(self.diff.reset_index()) if len(self.diff) else "no differences"
        frames = self.frames()
        if self.sweeps:  # the checkpoints' names (train/reward), as the sweep reports them
            metrics = sorted({m for s in self.sweeps.values() for m in s.metrics})
        else:  # the health frames' (reward)
            metrics = sorted({c for f in frames.values() for c in f.select_dtypes("number").columns} - HIDDEN)
        self.reward_metric = _named(REWARD, metrics)
        self.reward_plot.show(self._figure(self.reward_metric))
        wanted = _named(self.metric.value, metrics)
        self._loading = True  # one figure for the new metric list, not one per change of it
        try:
            self.metric.options = metrics or [wanted]
            self.metric.value = wanted if wanted in self.metric.options else self.metric.options[0]
        finally:
            self._loading = False
        self._plot_metric()
        self.step.value = min((r.latest_step for r in runs), default=0)
        self.names = list(self.sweeps) if self.sweeps else [r.name for r in runs]

    def frames(self) -> dict[str, pd.DataFrame]:
        """Each run's health frame by name."""
        return {r.name: r.frame for r in self.runs}

    def checkpoints(self, step: int) -> list[str]:
        """The names the chat endpoint serves each run's checkpoint at ``step`` under."""
        return [checkpoint_name(r.model, step) for r in self.runs]

    def chat(self, step: int | None = None) -> list[ChatCompare]:
        """A :class:`ChatCompare` per prompt of the runs' checkpoints at ``step`` (default: the step
        field), run now; they replace the previous ones."""
        if not self.runs:
            raise ValueError("no runs loaded")
        step = self.step.value if step is None else step
        prompts = [p for p in self.prompts.value.splitlines() if p.strip()]
        if not prompts:
            raise ValueError("give at least one prompt")
        for old in self.chat_area.children:
            old.close()
        compares = [
            ChatCompare(
                self.client, self.checkpoints(step), prompt=p, max_tokens=self.max_tokens, temperature=0.0
            )
            for p in prompts
        ]
        self.chat_area.children = compares
        for compare in compares:
            compare.start()
            compare.run()
        self.chat_step = step
        return compares

    def _figure(self, metric: str) -> go.Figure:
        """``metric``: each config's mean over seeds with its band, or each run's line (reward: ± std)."""
        if self.sweeps:
            return plots.mean_band(combine(self.sweeps), metric, by="config", level=self.level)
        return plots.runs_overlay(self.frames(), metric, band="reward_std" if metric == REWARD else None)

    def _plot_metric(self) -> None:
        if not (self.runs or self.sweeps) or not self.metric.value or self._loading:
            return
        self.metric_plot.show(self._figure(self.metric.value))
        if self.sweeps:
            self.seed_summary = mean_ci_table(self.sweeps, self.metric.value, self.ci_step, self.level)
            shown = self.seed_summary[["config", "step", "n", ci_column(self.level), "std"]]
            self.seed_table.value = f"<b>{html.escape(self.metric.value)} per config</b>" + frame_html(shown)

    def _seeded_run(self, name: str, sweep: SweepResult) -> Run:
        """The run of a config's first seed, named after the config (its config diff and chat)."""
        run = self._model_run(sweep.model_ids[min(sweep.model_ids)])
        run.name = name
        return run

    def _model_run(self, model_id: str) -> Run:
        model = self.client.models.retrieve(model_id)
        checkpoints = checkpoints_frame(self.client.models.checkpoints.list(model_id, limit=100))
        rl_jobs = [j for j in self.client.training_jobs.list(model_id=model_id) if j.kind == "rl"]
        latest = max(rl_jobs, key=lambda j: (j.created_at is not None, j.created_at), default=None)
        config = self._config(model, latest.id if latest is not None else None)
        steps = checkpoints["step"].dropna()
        return Run(model.name, model, None, health.model_health(checkpoints), config, int(steps.max()))

    def _job_run(self, job_id: str) -> Run:
        job = self.client.training_jobs.retrieve(job_id)
        if job.model_id is None:
            raise ValueError(f"job {job_id} does not say its model")
        model = self.client.models.retrieve(job.model_id)
        events = events_frame(self.client.training_jobs.events.list(job_id, limit=100))
        frame = health.job_health(events, (job.base_step or 0) + 1)
        step = job.result_step if job.result_step is not None else job.base_step or 0
        return Run(f"{model.name} job {job_id[:8]}", model, job_id, frame, self._config(model, job_id), step)

    def _config(self, model: Model, job_id: str | None) -> dict[str, Any]:
        """The model's base and adapter settings, and the config its job trained with."""
        config: dict[str, Any] = {"base_model": model.base_model, "full_finetuning": model.full_finetuning}
        if model.lora_config is not None:
            config |= flatten(model.lora_config.model_dump(exclude_none=True), "lora_config.")
        if job_id is not None:
            started = next(
                (
                    e
                    for e in self.client.training_jobs.events.list(job_id, limit=1)
                    if e.type == "training_started"
                ),
                None,
            )
            if started is not None:
                config |= flatten(started.data.get("config") or {})
        return config

    # ------------------------------------------------------------------ lifecycle and rendering

    def _start(self) -> None:
        self.load()

    def _stop(self) -> None:
        for compare in self.chat_area.children:
            compare.close()

    def summary(self) -> str:
        if self.sweeps and not self.seed_summary.empty:
            cells = self.seed_summary.iloc[:, [0, -1]].itertuples(index=False)
            step = self.seed_summary["step"].iloc[0]
            per_config = ", ".join(f"{name} {value}" for name, value in cells)
            return f"RunCompare over seeds: {self.metric.value} at step {step}: {per_config}"
        if not self.runs:
            return "RunCompare: nothing loaded"
        keys = ", ".join(self.diff.index[:6]) or "none"
        return f"RunCompare: {' vs '.join(self.names)}; configs differ in {keys}"

    def snapshot_html(self) -> str:
        """The diff table and both figures (plotly.js from its CDN), readable without a kernel."""
        if not (self.runs or self.sweeps):
            return f"<div>{html.escape(self.summary())}</div>"
        figures = "".join(
            self._figure(m).to_html(full_html=False, include_plotlyjs="cdn")
            for m in (self.reward_metric, self.metric.value)
        )
        title = html.escape(self.summary())
        tables = self.diff_table.value + self.seed_table.value
        return f'<div style="color:{_theme.TEXT}"><b>{title}</b>{tables}{figures}</div>'

    def static_html(self) -> str | None:
        return self.snapshot_html()
