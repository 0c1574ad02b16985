"""Unit tests of the job feed the live widgets poll (a fake client: the race it guards against is
hard to hit over HTTP on purpose)."""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace
from typing import Any

from toolkit.types.training import TrainingJob, TrainingJobEvent
from toolkit.widgets._polling import JobEvents


class FakeJobs:
    """``retrieve`` answers the given statuses in turn; ``events.list`` everything after ``after``."""

    def __init__(self, statuses: list[str], events: list[TrainingJobEvent]) -> None:
        self.statuses = deque(statuses)
        self.retrieved = 0
        self.events = SimpleNamespace(list=self.list_events)
        self._events = events

    def retrieve(self, job_id: str) -> TrainingJob:
        self.retrieved += 1
        status = self.statuses.popleft() if len(self.statuses) > 1 else self.statuses[0]
        return TrainingJob(id=job_id, status=status)  # type: ignore[arg-type]

    def list_events(self, job_id: str, after: str | None = None, limit: int = 100) -> list[TrainingJobEvent]:
        ids = [e.id for e in self._events]
        return self._events[ids.index(after) + 1 :] if after else list(self._events)


def feed(statuses: list[str], types: list[str]) -> tuple[JobEvents, FakeJobs]:
    events = [TrainingJobEvent(id=str(i), type=t) for i, t in enumerate(types)]  # type: ignore[arg-type]
    jobs = FakeJobs(statuses, events)
    client: Any = SimpleNamespace(training_jobs=jobs)
    return JobEvents(client, "job-1"), jobs


def test_a_job_that_ends_between_the_two_reads_is_read_again() -> None:
    """The job is read as running, then its events already hold the end: the status must not lag."""
    events, jobs = feed(["running", "cancelled"], ["training_started", "training_ended"])
    assert len(events.fetch()) == 2
    assert events.job is not None and events.job.status == "cancelled"
    assert events.ended and jobs.retrieved == 2


def test_a_running_job_is_read_once_per_fetch() -> None:
    events, jobs = feed(["running"], ["training_started", "gradient_step"])
    events.fetch()
    assert events.job is not None and events.job.status == "running"
    assert not events.ended and jobs.retrieved == 1
    assert events.fetch() == [] and jobs.retrieved == 2
