"""A job's events as a long poll (the extension ``wait``): the server holds an empty page until the
next event is written, then lingers a moment for more progress (so that following a job does not
interrupt each gradient step), answers at once with the job's end, and gives up with an empty page
after the wait; ``job.wait()`` follows a job on the local server that way."""

from __future__ import annotations

import threading
import time

import httpx

from conftest import LocalServer
from support.training_helpers import long_sft_job, new_model, wait_for_event, wait_job
from toolkit.server.training.routes.jobs import LINGER
from toolkit.tasks import reverse


def test_a_long_poll_answers_when_the_next_event_is_written(server: LocalServer) -> None:
    client = server.client()
    model = new_model(client, "long-poll")
    running = long_sft_job(client, model.id, seed=5)
    two = [reverse.conversation(w) for w in ("cat", "dog")]
    queued = client.sft_training_jobs.create_from_data(model_id=model.id, data=two)
    wait_for_event(client, running.id, "gradient_step")
    answer: dict[str, object] = {}
    path = f"/v1/preview/training-jobs/{queued.id}/events"
    (queued_event,) = client.training_jobs.events.list(queued.id)  # {"ahead": 1}, written at creation

    def poll(http: httpx.Client) -> None:
        started = time.monotonic()
        answer["page"] = http.get(path, params={"after": queued_event.id, "wait": 30}).json()
        answer["seconds"] = time.monotonic() - started

    with server.http() as http:
        last = list(client.training_jobs.events.list(running.id, limit=100))[-1].id  # every page
        started = time.monotonic()
        more = http.get(
            f"/v1/preview/training-jobs/{running.id}/events", params={"after": last, "limit": 100, "wait": 30}
        ).json()["data"]
        assert more and all(e["type"] == "gradient_step" for e in more)  # progress, in one batch
        assert LINGER <= time.monotonic() - started < 30

        waiting = threading.Thread(target=poll, args=(http,))
        waiting.start()
        time.sleep(1.0)
        assert "page" not in answer  # held: the queued job has no event after its "queued" yet
        client.training_jobs.cancel(running.id)  # the queued job starts, and writes its first event
        waiting.join(30)
        page = answer["page"]
        assert isinstance(page, dict) and page["data"], answer
        assert page["data"][0]["type"] == "training_started"
        assert 1.0 <= float(answer["seconds"]) < 30  # type: ignore[arg-type]

        assert wait_job(client, queued.id).status == "succeeded"
        events = http.get(path, params={"wait": 30}).json()["data"]  # there are events: at once
        assert [e["type"] for e in events][-1] == "training_ended"
        started = time.monotonic()
        after_last = http.get(path, params={"after": events[-1]["id"], "wait": 0.5}).json()
        assert after_last["data"] == [] and time.monotonic() - started >= 0.5  # nothing came
        for wait in (-1, 31):
            assert http.get(path, params={"wait": wait}).status_code == 422


def test_wait_follows_a_job_on_the_local_server_by_long_polls(server: LocalServer) -> None:
    client = server.client()
    model = new_model(client, "follow")
    asked: list[httpx.Request] = []
    client._transport.http.event_hooks["request"].append(asked.append)
    job = client.sft_training_jobs.create_from_data(
        model_id=model.id, data=[reverse.conversation("cat")] * 4, config={"batch_size": 2}
    )
    assert job.wait(progress=False).step == 1
    polls = [r for r in asked if r.url.path.endswith("/events")]
    assert polls and all(r.url.params["wait"] == "10.0" for r in polls)
    assert all("wait" not in r.url.params for r in asked if not r.url.path.endswith("/events"))
