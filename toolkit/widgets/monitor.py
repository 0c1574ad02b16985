"""JobMonitor: a training job's status, progress, live loss/reward figure, events frame and cancel."""

from __future__ import annotations

import html

import ipywidgets as w
import pandas as pd
import plotly.graph_objects as go

from .. import frames, plots
from ..client import Client
from ..types.training import TrainingJob, TrainingJobEvent
from ._common import FigureBox, Loop, button, error_text, frame_html, message

TERMINAL_EVENTS = {"training_ended", "training_failed"}
TERMINAL_STATUSES = {"succeeded", "failed", "cancelled"}
MAX_ERRORS = 5


class JobMonitor(w.VBox):
    """Watches one job. Polling runs in a background thread (``interval`` seconds) and stops on its own
    when the job ends; call :meth:`poll` to advance by hand and :meth:`wait` to block until the end.
    Several monitors can run at once.
    """

    def __init__(self, client: Client, job_id: str, *, interval: float = 1.0, start: bool = True) -> None:
        self.client = client
        self.job_id = job_id
        self.interval = interval
        self.job: TrainingJob | None = None
        self.events: pd.DataFrame = frames.events_frame([])
        self._events: list[TrainingJobEvent] = []
        self._errors = 0
        self._loop: Loop | None = None
        self.status = w.HTML()
        self.progress = w.IntProgress(value=0, min=0, max=1, description="steps", bar_style="info")
        self.plot = FigureBox(plots.training_curves(self.events))
        self.failure = w.HTML(layout=w.Layout(display="none"))
        self.table = w.HTML(frame_html(self.events))
        self.cancel_button = button("Cancel", self.cancel, style="warning", icon="stop")
        header = w.HBox([self.status, self.progress, self.cancel_button])
        super().__init__([header, self.failure, self.plot, w.Accordion([self.table], titles=("Events",))])
        self._render()
        if start:
            self.start()

    # ------------------------------------------------------------------ logic

    @property
    def figure(self) -> go.FigureWidget:
        """The figure on show."""
        return self.plot.figure

    @property
    def done(self) -> bool:
        """The job reached a terminal status or event."""
        if self.job is not None and self.job.status in TERMINAL_STATUSES:
            return True
        return bool(self._events) and self._events[-1].type in TERMINAL_EVENTS

    @property
    def num_steps(self) -> int:
        return sum(e.type == "gradient_step" for e in self._events)

    def poll(self) -> bool:
        """Fetch new events (all pages after the last seen) and the job; True while it still runs."""
        # The job first: once it is terminal, the events read after it include the terminal event.
        self.job = self.client.training_jobs.retrieve(self.job_id)
        after = self._events[-1].id if self._events else None
        new = list(self.client.training_jobs.events.list(self.job_id, after=after, limit=100))
        if new:
            self._events.extend(new)
            self.events = frames.events_frame(self._events)
        self._render(changed=bool(new))
        return not self.done

    def cancel(self) -> None:
        try:
            self.job = self.client.training_jobs.cancel(self.job_id)
        except Exception as exc:
            self._show_failure(f"cancel failed: {error_text(exc)}")
        self._render()

    # ------------------------------------------------------------------ background polling

    def _tick(self) -> bool:
        try:
            running = self.poll()
            self._errors = 0
            return running
        except Exception as exc:
            self._errors += 1
            self.status.value = message(
                "error", f"polling failed ({self._errors}/{MAX_ERRORS}): {error_text(exc)}"
            )
            return self._errors < MAX_ERRORS

    def start(self) -> None:
        """Start background polling (no-op while it runs)."""
        if self._loop is None or not self._loop.running:
            self._loop = Loop(self._tick, self.interval, name=f"monitor-{self.job_id[:8]}")

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.stop()

    @property
    def polling(self) -> bool:
        return self._loop is not None and self._loop.running

    def wait(self, timeout: float | None = None) -> TrainingJob | None:
        """Block until polling ends (the job ended, or polling gave up); returns the last job state."""
        if self._loop is None:
            self.start()
        assert self._loop is not None
        self._loop.join(timeout)
        return self.job

    # ------------------------------------------------------------------ rendering

    def _show_failure(self, text: str) -> None:
        self.failure.value = (
            '<div style="border:1px solid #d62728;background:#fdecea;padding:6px;border-radius:4px">'
            "<b>Training failed</b><pre style='white-space:pre-wrap;margin:0'>"
            f"{html.escape(text)}</pre></div>"
        )
        self.failure.layout.display = None

    def _render(self, changed: bool = True) -> None:
        job = self.job
        status = job.status if job and job.status else "waiting"
        total = (job.num_sequences if job else None) or self._started_sequences() or 1
        self.progress.max = max(total, self.num_steps, 1)
        self.progress.value = self.num_steps
        self.progress.bar_style = {"succeeded": "success", "failed": "danger", "cancelled": "warning"}.get(
            status, "info"
        )
        self.status.value = f"<b>job {html.escape(self.job_id[:8])}</b> {html.escape(status)}"
        self.cancel_button.disabled = self.done
        error = (job.error if job else None) or self._failure_message()
        if error or status == "failed":
            self._show_failure(error or "the job failed without a message")
        if changed:
            self.plot.show(plots.training_curves(self.events))
            self.table.value = frame_html(self.events)

    def _started_sequences(self) -> int | None:
        started = [e for e in self._events if e.type == "training_started"]
        return int(started[-1].data.get("num_sequences") or 0) if started else None

    def _failure_message(self) -> str | None:
        failed = [e for e in self._events if e.type == "training_failed"]
        return str(failed[-1].data.get("error_message") or "unknown error") if failed else None
