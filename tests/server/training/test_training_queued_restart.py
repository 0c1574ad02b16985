"""An RL job queued when the server is killed runs after the restart from its stored request (the
running server hands the worker the request it validated; only a restart reads the stored copy)."""

from __future__ import annotations

from conftest import LocalServer
from support.training_helpers import (
    long_sft_job,
    new_model,
    rewarded_group,
    served,
    wait_for_event,
    wait_job,
)


def test_a_queued_rl_job_runs_from_its_stored_request_after_a_kill(fresh_server: LocalServer) -> None:
    client = fresh_server.client()
    model = new_model(client, "queued-rl")
    base = served(model, 0)
    group = rewarded_group(client, base)
    running = long_sft_job(client, model.id, seed=7)
    queued = client.training_jobs.create(
        model_id=model.id, trajectory_groups=[group], experimental_config={"learning_rate": 1e-4}
    )
    wait_for_event(client, running.id, "gradient_step")
    fresh_server.kill()
    client.close()
    fresh_server.start()
    client = fresh_server.client()
    assert client.training_jobs.retrieve(running.id).status == "failed"
    job = wait_job(client, queued.id)
    assert (job.status, job.result_step, job.error) == ("succeeded", 1, None)
    events = list(client.training_jobs.events.list(queued.id, limit=100))
    assert [e.type for e in events] == ["queued", "training_started", "gradient_step", "training_ended"]
    assert events[0].data == {"ahead": 1}  # written when it was created; nothing ahead after the restart
