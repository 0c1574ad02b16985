"""Polling shared by the live widgets (job monitor, RL health): a job's events read incrementally, and a
widget base whose background loop calls :meth:`PollingWidget.poll` until it says the work is done."""

from __future__ import annotations

from traitlets import Bool, Float

from ..client import Client
from ..types.training import TERMINAL_EVENTS, TrainingJob, TrainingJobEvent
from ._base import ToolkitWidget
from ._common import JOIN_TIMEOUT_S, Loop

TERMINAL_STATUSES = {"succeeded", "failed", "cancelled"}
MAX_ERRORS = 5


class JobEvents:
    """A job's state and its events so far; :meth:`fetch` reads the job, then the events after the
    last one seen (every page)."""

    def __init__(self, client: Client, job_id: str) -> None:
        self.client = client
        self.job_id = job_id
        self.job: TrainingJob | None = None
        self.events: list[TrainingJobEvent] = []

    def fetch(self) -> list[TrainingJobEvent]:
        """The new events (the job first: once it is terminal, the events read after it include the
        terminal event; a job that ended between the two reads is read again, so that its status
        never lags its events)."""
        job = self.client.training_jobs.retrieve(self.job_id)
        after = self.events[-1].id if self.events else None
        new = list(self.client.training_jobs.events.list(self.job_id, after=after, limit=100))
        if new and new[-1].type in TERMINAL_EVENTS and job.status not in TERMINAL_STATUSES:
            job = self.client.training_jobs.retrieve(self.job_id)
        self.job = job
        self.events.extend(new)
        return new

    @property
    def ended(self) -> bool:
        """The job is over (its status, or its last event, says so)."""
        status = self.job.status if self.job is not None else None
        return status in TERMINAL_STATUSES or (bool(self.events) and self.events[-1].type in TERMINAL_EVENTS)


class PollingWidget(ToolkitWidget):
    """A widget that calls :meth:`poll` every ``interval`` seconds in a background thread, from
    :meth:`start_polling` until ``poll`` returns False, polling fails :data:`MAX_ERRORS` times in a
    row (each error shows in the status line), or :meth:`close`. State trait: ``polling``."""

    interval = Float(1.0)
    polling = Bool(False)
    _loop: Loop | None = None
    _errors = 0

    def poll(self) -> bool:
        """Fetch what is new; True while there is more to come."""
        raise NotImplementedError

    def _tick(self) -> bool:
        try:
            running = self.poll()
            self._errors = 0
        except Exception as exc:
            self._errors += 1
            self.status_line.error(exc, f"polling ({self._errors}/{MAX_ERRORS})")
            running = self._errors < MAX_ERRORS
        if not running:
            self.polling = False
            self.refresh_output()
        return running

    def start_polling(self, name: str) -> None:
        """Start the background loop (after stopping one that runs)."""
        self._stop()
        self.polling = True
        self._loop = Loop(self._tick, self.interval, name=name)

    def _stop(self) -> None:
        if self._loop is not None:
            self._loop.stop()
            self._loop.join(JOIN_TIMEOUT_S)
        self.polling = False

    def join(self, timeout: float | None = None) -> None:
        """Start (if not yet) and block until polling ends."""
        self.start()
        if self._loop is not None:
            self._loop.join(timeout)
