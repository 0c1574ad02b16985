"""JobMonitor: a training job's status (and place in the queue), progress, warnings (nothing trained,
stale groups), live training curves, events frame and cancel."""

from __future__ import annotations

import html

import ipywidgets as w
import pandas as pd
import plotly.graph_objects as go
from traitlets import Bool, Int, List, Unicode, observe

from .. import _theme, frames, plots
from ..client import Client
from ..types.training import TrainingJob, TrainingJobEvent
from ._common import FigureBox, StatusLine, button, frame_html
from ._polling import JobEvents, PollingWidget

BAR_STYLES = {"succeeded": "success", "failed": "danger", "cancelled": "warning"}


class JobMonitor(PollingWidget):
    """Watches one job. :meth:`start` (or the first display) starts polling in a background thread
    (every ``interval`` seconds), which stops on its own when the job ends; :meth:`poll` advances by
    hand and :meth:`wait` blocks until the end. Several monitors can run at once.

    State traits: ``job_id``, ``status`` (the job's, ``waiting`` before the first poll), ``num_steps``,
    ``total_steps``, ``done``, ``polling``, ``error`` (the failure message), ``queued_behind`` (while
    queued: the jobs ahead, from its last ``queued`` event), ``warnings`` (the messages of its
    ``warning`` events) and ``trained`` (from ``training_ended``: false when nothing was trained).
    """

    job_id = Unicode()
    status = Unicode("waiting")
    num_steps = Int(0)
    total_steps = Int(0)
    done = Bool(False)
    error = Unicode(None, allow_none=True)
    queued_behind = Int(0)
    warnings = List(Unicode())
    trained = Bool(None, allow_none=True)

    def __init__(self, client: Client, job_id: str, *, interval: float = 1.0) -> None:
        self.client = client
        self.events: pd.DataFrame = frames.events_frame([])
        self._feed = JobEvents(client, job_id)
        self.header = w.HTML()
        self.progress = w.IntProgress(value=0, min=0, max=1, description="steps", bar_style="info")
        self.plot = FigureBox(plots.training_curves(self.events))
        self.failure = w.HTML(layout=w.Layout(display="none"))
        self.notice = w.HTML(layout=w.Layout(display="none"))
        self.table = w.HTML(frame_html(self.events))
        self.status_line = StatusLine()
        self.cancel_button = button("Cancel", self.cancel, style="warning", icon="stop")
        header = w.HBox([self.header, self.progress, self.cancel_button])
        accordion = w.Accordion([self.table], titles=("Events",))
        super().__init__([header, self.failure, self.notice, self.status_line, self.plot, accordion])
        self.job_id, self.interval = job_id, interval
        self._render_status()

    # ------------------------------------------------------------------ logic

    @property
    def figure(self) -> go.FigureWidget:
        """The figure on show."""
        return self.plot.figure

    @property
    def job(self) -> TrainingJob | None:
        """The job as the last poll read it."""
        return self._feed.job

    @property
    def _events(self) -> list[TrainingJobEvent]:
        return self._feed.events

    def poll(self) -> bool:
        """Fetch new events (all pages after the last seen) and the job; True while it still runs."""
        new = self._feed.fetch()
        job = self._feed.job
        assert job is not None
        if new:
            self.events = frames.events_frame(self._events)
            self.plot.show(plots.training_curves(self.events))
            self.table.value = frame_html(self.events)
        with self.hold_trait_notifications():
            self.num_steps = sum(e.type == "gradient_step" for e in self._events)
            self.total_steps = max(job.num_sequences or self._started_sequences() or 0, self.num_steps)
            self.error = job.error or self._failure_message()
            self.status = job.status or "waiting"
            self.queued_behind = self._ahead() if self.status == "queued" else 0
            self.warnings = [str(e.data.get("message")) for e in self._events if e.type == "warning"]
            self.trained = self._trained()
            self.done = self._feed.ended
        return not self.done

    def cancel(self) -> None:
        """Ask the server to cancel the job (the next poll shows it ending)."""
        with self.status_line.catching("cancel"):
            job = self._feed.job = self.client.training_jobs.cancel(self.job_id)
            self.status = job.status or self.status
            self.status_line.info("cancel requested")

    # ------------------------------------------------------------------ background polling

    def _start(self) -> None:
        self.start_polling(f"monitor-{self.job_id[:8]}")

    def wait(self, timeout: float | None = None) -> TrainingJob | None:
        """Block until polling ends (the job ended, or polling gave up); returns the last job state."""
        self.join(timeout)
        return self.job

    # ------------------------------------------------------------------ rendering

    def summary(self) -> str:
        steps = (
            f"{self.num_steps}/{self.total_steps} steps" if self.total_steps else f"{self.num_steps} steps"
        )
        error = f": {self.error}" if self.error else ""
        return f"JobMonitor: job {self.job_id[:8]} {self._state()}, {steps}{error}"

    def _state(self) -> str:
        """The status as the header says it: with the place in the queue, or that nothing trained."""
        if self.status == "queued" and self.queued_behind:
            return f"queued behind {self.queued_behind} job(s)"
        if self.trained is False:
            return f"{self.status} (nothing trained)"
        return self.status

    @observe("status", "num_steps", "total_steps", "done", "error", "queued_behind", "warnings", "trained")
    def _render_status(self, _: object = None) -> None:
        self.progress.max = max(self.total_steps, self.num_steps, 1)
        self.progress.value = self.num_steps
        self.progress.bar_style = "warning" if self.trained is False else BAR_STYLES.get(self.status, "info")
        self.header.value = f"<b>job {html.escape(self.job_id[:8])}</b> {html.escape(self._state())}"
        self.cancel_button.disabled = self.done
        if self.warnings:
            lines = "".join(f"<div>{html.escape(m)}</div>" for m in self.warnings)
            self.notice.value = (
                f'<div style="border:1px solid {_theme.WARN};background:{_theme.tint(_theme.WARN, 12)};'
                f'padding:6px;border-radius:4px"><b>Warning</b>{lines}</div>'
            )
            self.notice.layout.display = None
        if self.error or self.status == "failed":
            title = "Training cancelled" if self.status == "cancelled" else "Training failed"
            color = _theme.WARN if self.status == "cancelled" else _theme.ERROR
            self.failure.value = (
                f'<div style="border:1px solid {color};background:{_theme.tint(color, 12)};'
                f'padding:6px;border-radius:4px"><b>{title}</b>'
                "<pre style='white-space:pre-wrap;margin:0'>"
                f"{html.escape(self.error or 'the job failed without a message')}</pre></div>"
            )
            self.failure.layout.display = None

    def _started_sequences(self) -> int | None:
        started = [e for e in self._events if e.type == "training_started"]
        return int(started[-1].data.get("num_sequences") or 0) if started else None

    def _ahead(self) -> int:
        queued = [e for e in self._events if e.type == "queued"]
        return int(queued[-1].data.get("ahead") or 0) if queued else 0

    def _trained(self) -> bool | None:
        ended = [e for e in self._events if e.type == "training_ended"]
        trained = ended[-1].data.get("trained") if ended else None
        return trained if isinstance(trained, bool) else None

    def _failure_message(self) -> str | None:
        failed = [e for e in self._events if e.type == "training_failed"]
        return str(failed[-1].data.get("error_message") or "unknown error") if failed else None
