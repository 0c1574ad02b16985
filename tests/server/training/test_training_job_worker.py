"""The job worker's health probe: idle, busy, stuck and dead workers, and its timeout."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from toolkit.server.training.job_worker import JobWorker


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()  # whatever the test did, let the worker's item end


def occupy(worker: JobWorker, release: threading.Event, *, beating: bool) -> None:
    """Give the worker an item that runs until ``release`` (showing progress or not); wait until it runs."""
    started = threading.Event()

    def work() -> None:
        started.set()
        while not release.wait(0.01):
            if beating:
                worker.beat()

    worker.submit(work)
    assert started.wait(10)


def test_an_idle_worker_answers_the_ping() -> None:
    worker = JobWorker()
    try:
        probe = worker.probe(timeout=5)
        assert (probe.success, probe.error) == (True, None)
        assert 0 <= probe.duration_ms < 5000  # answered within the probe's timeout
    finally:
        worker.stop()


def test_a_busy_worker_that_makes_progress_is_alive(release: threading.Event) -> None:
    worker = JobWorker(stall_after=60)
    occupy(worker, release, beating=True)
    probe = worker.probe(timeout=0.05)
    assert (probe.success, probe.error) == (True, None)
    release.set()
    worker.stop()


def test_a_stuck_worker_is_a_failure_and_the_probe_does_not_wait_for_it(release: threading.Event) -> None:
    worker = JobWorker(stall_after=0.01)
    occupy(worker, release, beating=False)
    time.sleep(0.05)  # longer than stall_after without a beat
    # The item only ends when ``release`` is set, after the probe: a probe that waited for the
    # worker could never return a failure here.
    probe = worker.probe(timeout=0.05)
    assert not probe.success
    assert probe.error is not None and "no progress" in probe.error
    release.set()
    worker.stop()


def test_a_dead_worker_is_a_failure() -> None:
    worker = JobWorker()
    worker.stop()
    probe = worker.probe(timeout=5)
    assert (probe.success, probe.error) == (False, "the job worker thread is not running")


def test_a_failing_item_does_not_kill_the_worker() -> None:
    worker = JobWorker()
    try:
        worker.submit(lambda: 1 / 0)  # type: ignore[arg-type, func-returns-value]
        done = threading.Event()
        worker.submit(done.set)
        assert done.wait(10)
        assert worker.probe(timeout=5).success
    finally:
        worker.stop()
