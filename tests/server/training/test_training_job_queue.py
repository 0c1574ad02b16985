"""Jobs waiting in the server's queue say so, over loopback HTTP: a ``queued {ahead}`` event when a job
is created behind others (of any user: one worker runs every job in turn) and again when its place
changes, ``queue_position`` on the job (0: next to run), and "queued behind N job(s)" on the progress
line of ``wait()``. The exact places need a queue no other test shares: a server of this file's own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from conftest import LocalServer
from support.training_helpers import job_events, long_sft_job, new_model, wait_for_event, wait_job
from toolkit.tasks import reverse


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    """This file's own server (the session's runs other files' jobs, cancelled ones until they stop)."""
    own = LocalServer(tmp_path_factory.mktemp("queue")).start()
    yield own
    own.stop()


def test_queued_jobs_report_their_place_as_it_changes(
    server: LocalServer, capsys: pytest.CaptureFixture[str]
) -> None:
    client = server.client()
    other = server.client(server.new_user_key("queue-other"))
    model, theirs = new_model(client, "queue"), new_model(other, "queue")
    running = long_sft_job(other, theirs.id, seed=11)  # another user's long job, e.g. another kernel's
    wait_for_event(other, running.id, "gradient_step")
    two = [reverse.conversation(w) for w in ("cat", "dog")]
    second = client.sft_training_jobs.create_from_data(model_id=model.id, data=two)
    third = client.sft_training_jobs.create_from_data(model_id=model.id, data=two, allow_duplicate=True)
    jobs = {j.id: j for j in client.training_jobs.list(model_id=model.id)}
    assert [(jobs[j.id].status, jobs[j.id].queue_position) for j in (second, third)] == [
        ("queued", 0),
        ("queued", 1),
    ]
    assert other.training_jobs.retrieve(running.id).queue_position is None  # running: not queued
    assert [(e.type, e.data) for e in job_events(client, third.id)] == [("queued", {"ahead": 2})]

    second.cancel()  # a job ahead leaves the queue: the third moves up
    assert client.training_jobs.retrieve(third.id).queue_position == 0
    assert [e.data for e in job_events(client, third.id)] == [{"ahead": 2}, {"ahead": 1}]
    assert [e.type for e in job_events(client, second.id)] == ["queued", "training_failed"]

    other.training_jobs.cancel(running.id)  # the third runs next: no "ahead 0" event, it starts
    checkpoint = third.wait(progress=True)
    assert checkpoint.step == 1
    assert wait_job(other, running.id).status == "cancelled"
    types = [e.type for e in job_events(client, third.id)]
    assert types == ["queued", "queued", "training_started", "gradient_step", "training_ended"]
    progress = capsys.readouterr().err  # tqdm's line, replayed from the first event
    assert f"train {third.id[:8]} queued behind 2 job(s)" in progress
    assert f"train {third.id[:8]} queued behind 1 job(s)" in progress
    assert client.training_jobs.retrieve(third.id).queue_position is None


def test_a_job_created_with_nothing_ahead_has_no_queued_event(server: LocalServer) -> None:
    client = server.client()
    model = new_model(client, "queue-free")
    job = client.sft_training_jobs.create_from_data(model_id=model.id, data=[reverse.conversation("cat")])
    job.wait(progress=False)
    assert [e.type for e in job_events(client, job.id)] == [
        "training_started",
        "gradient_step",
        "training_ended",
    ]
