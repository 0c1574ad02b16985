"""RunHealth: a run's RL health (:func:`toolkit.plots.run_health`) and its warnings, live."""

from __future__ import annotations

import html

import ipywidgets as w
import pandas as pd
import plotly.graph_objects as go
from traitlets import Int, List, Unicode

from .. import _theme, health, plots
from ..client import Client
from ..frames import checkpoints_frame, events_frame
from ._common import FigureBox, StatusLine, button
from ._polling import JobEvents, PollingWidget

ACTIVE = {"queued", "running"}


def warnings_html(found: list[health.HealthWarning]) -> str:
    """The warnings as a list (each with its step), or a line saying there are none."""
    if not found:
        return f'<div style="color:{_theme.SUCCESS}">No known failure shows.</div>'
    items = "".join(f"<li><b>step {w.step:g}</b>: {html.escape(w.message)}</li>" for w in found)
    return f'<ul style="color:{_theme.WARN};margin:2px 0;padding-left:18px">{items}</ul>'


class RunHealth(PollingWidget):
    """The health of one job (per gradient step) or one model (per RL step, from its checkpoints):
    small multiples of the TRL-named metrics and the warnings :func:`toolkit.health.health_warnings`
    raises. Live: :meth:`start` (or the first display) polls until the job ends, or while a job of the
    model is queued or running. Pick another with :meth:`show` (or the model list and job field).

    State traits: ``source`` (``job <id>`` or ``model <id>``), ``num_steps`` (rows of the frame) and
    ``warnings`` (the messages); ``frame`` holds the health frame, ``found`` the warnings.
    """

    source = Unicode("")
    num_steps = Int(0)
    warnings = List(Unicode())

    def __init__(
        self, client: Client, *, job_id: str | None = None, model_id: str | None = None, interval: float = 2.0
    ) -> None:
        self.client = client
        self.frame: pd.DataFrame = pd.DataFrame({"step": []})
        self.found: list[health.HealthWarning] = []
        self._picked_job, self._picked_model = job_id, model_id
        self._feed: JobEvents | None = None
        self.model = w.Dropdown(description="model", options=[], layout=w.Layout(width="360px"))
        self.job = w.Text(value=job_id or "", description="job", placeholder="job id")
        self.plot = FigureBox(plots.run_health(self.frame))
        self.warning_list = w.HTML()
        self.status_line = StatusLine()
        pick = w.HBox(
            [
                self.model,
                button("Show model", self.action("load", self._show_model), "primary", "line-chart"),
                self.job,
                button("Show job", self.action("load", self._show_job), icon="tasks"),
            ]
        )
        super().__init__([pick, self.status_line, self.warning_list, self.plot])
        self.interval = interval

    # ------------------------------------------------------------------ logic

    @property
    def figure(self) -> go.FigureWidget:
        """The figure on show."""
        return self.plot.figure

    def show(self, *, job_id: str | None = None, model_id: str | None = None) -> None:
        """Show a job or a model: read it now, and keep polling while it trains."""
        self._stop()
        self._picked_job, self._picked_model = job_id, model_id if job_id is None else None
        self._feed = JobEvents(self.client, job_id) if job_id is not None else None
        self.source = f"job {job_id}" if job_id is not None else f"model {model_id}"
        self.frame = pd.DataFrame({"step": []})
        if self.poll() and self.started:
            self.start_polling(f"health-{(job_id or model_id or '')[:8]}")

    def poll(self) -> bool:
        """Read what is new of the job or model; True while it trains."""
        if self._feed is not None:
            new = self._feed.fetch()
            job = self._feed.job
            if new or self.frame.empty:
                step = (job.base_step or 0) + 1 if job is not None else 1
                self._render(health.job_health(events_frame(self._feed.events), step))
            return not self._feed.ended
        if self._picked_model is None:
            return False
        checkpoints = checkpoints_frame(self.client.models.checkpoints.list(self._picked_model, limit=100))
        frame = health.model_health(checkpoints)
        if frame.empty or not frame.equals(self.frame):  # a new checkpoint: draw again
            self._render(frame)
        jobs = self.client.training_jobs.list(model_id=self._picked_model)
        return any(j.status in ACTIVE for j in jobs)

    def _render(self, frame: pd.DataFrame) -> None:
        self.frame = frame
        self.found = health.health_warnings(frame)
        self.plot.show(plots.run_health(frame, warnings=self.found))
        self.warning_list.value = warnings_html(self.found)
        with self.hold_trait_notifications():
            self.num_steps = len(frame)
            self.warnings = [w.message for w in self.found]

    def _show_model(self) -> None:
        if not self.model.value:
            raise ValueError("pick a model")
        self.show(model_id=self.model.value)

    def _show_job(self) -> None:
        if not self.job.value.strip():
            raise ValueError("give a job id")
        self.show(job_id=self.job.value.strip())

    # ------------------------------------------------------------------ lifecycle

    def _start(self) -> None:
        models = self.client.models.list()
        self.model.options = [(f"{m.name} ({m.id[:8]})", m.id) for m in models]
        if self._picked_model in {m.id for m in models}:
            self.model.value = self._picked_model
        if self._picked_job is not None or self._picked_model is not None:
            self.show(job_id=self._picked_job, model_id=self._picked_model)

    # ------------------------------------------------------------------ rendering

    def summary(self) -> str:
        if not self.source:
            return "RunHealth: nothing picked"
        x = self.frame.attrs.get("x", "step")
        found = (
            f"{len(self.found)} warning(s): " + "; ".join(w.rule for w in self.found)
            if self.found
            else "healthy"
        )
        return f"RunHealth: {self.source}, {self.num_steps} {x}(s), {found}"

    def snapshot_html(self) -> str:
        """The warnings and the figure (plotly.js from its CDN), readable without a kernel."""
        figure = plots.run_health(self.frame, warnings=self.found).to_html(
            full_html=False, include_plotlyjs="cdn"
        )
        title = html.escape(self.summary())
        return f'<div style="color:{_theme.TEXT}"><b>{title}</b>{warnings_html(self.found)}{figure}</div>'

    def static_html(self) -> str | None:
        return self.snapshot_html()
