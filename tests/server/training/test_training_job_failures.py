"""Training jobs that must fail, stop or stay private, over loopback HTTP: untrainable choices and
malformed SFT data fail with readable messages, bad requests fail at request time, jobs cancel while
the server answers, users never see each other's jobs, the async handle follows events, and a
server killed mid-job fails that job on restart without a checkpoint."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

import toolkit as tk
from conftest import LocalServer
from support.training_helpers import (
    BASE,
    job_events,
    new_model,
    prompt,
    rewarded_group,
    served,
    wait_for_event,
    wait_job,
)
from toolkit.client.jobs import TrainingJobFailed, TrainingJobHandle
from toolkit.tasks import reverse


def test_untrainable_choices_fail_with_a_readable_message(server: LocalServer) -> None:
    client = server.client()
    model = new_model(client, "untrainable")
    base = served(model, 0)

    def run(config: dict[str, object] | None = None, **choice_kw: object) -> TrainingJobHandle:
        group = rewarded_group(client, base, **choice_kw)
        return client.training_jobs.create(
            model_id=model.id, trajectory_groups=[group], experimental_config=config
        )

    with pytest.raises(TrainingJobFailed, match=r"no logprobs.*allow_training_without_logprobs"):
        run(logprobs=None).wait(progress=False)
    with pytest.raises(TrainingJobFailed, match=r"missing vLLM prompt_token_ids/token_ids"):
        run(prompt_token_ids=None, token_ids=None).wait(progress=False)
    failed = list(client.training_jobs.list(model_id=model.id))[-1]
    assert (failed.status, failed.error) == (
        "failed",
        "group 0, trajectory 0, message 1: Trainable Choice is missing vLLM prompt_token_ids/token_ids."
        " Use a vLLM endpoint with return_token_ids enabled.",
    )
    events = job_events(client, failed.id)
    assert events[-1].type == "training_failed" and events[-1].data["error_message"] == failed.error
    # allowed: without token ids the choice is tokenized with the chat template
    allowed = run(
        {"allow_training_without_logprobs": True}, logprobs=None, prompt_token_ids=None, token_ids=None
    )
    assert allowed.wait(progress=False).step == 1


def test_bad_requests_fail_at_request_time(server: LocalServer) -> None:
    client = server.client()
    model = new_model(client, "bad")
    with server.http() as http:
        missing = http.post("/v1/preview/training-jobs", json={"model_id": "nope", "trajectory_groups": []})
        assert missing.status_code == 404
        for url in ("https://example.com/data", "wandb-artifact:///local/tests-training/none:v0"):
            body = {"model_id": model.id, "training_data_url": url, "config": None}
            answer = http.post("/v1/preview/sft-training-jobs", json=body)
            assert answer.status_code == 422 and answer.json()["detail"][0]["loc"][-1] == "training_data_url"
    artifact = client.artifacts.upload(
        project="tests-training", files={"train.jsonl": json.dumps({"messages": reverse.conversation("cat")})}
    )
    with pytest.raises(tk.client.UnprocessableEntityError, match="learning rates for 1 batches"):
        client.sft_training_jobs.create(
            model_id=model.id, training_data_url=artifact.url, config={"learning_rate": [1e-4, 1e-4]}
        )


def test_malformed_sft_data_fails_the_job_with_its_line(server: LocalServer) -> None:
    client = server.client()
    model = new_model(client, "baddata")
    good = reverse.conversation("cat")
    bad = [*prompt("cat"), {"role": "assistant", "content": 5}]  # passes the upload check, not the template
    job = client.sft_training_jobs.create_from_data(model_id=model.id, data=[good, good, bad])
    with pytest.raises(TrainingJobFailed, match=r"train\.jsonl, line 3"):
        job.wait(progress=False)
    assert [c.step for c in client.models.checkpoints.list(model.id)] == [0]


def running_and_queued(
    client: tk.Client, model_id: str, data: list[Any], queued: int
) -> tuple[TrainingJobHandle, TrainingJobHandle]:
    """A long SFT job on ``data`` (one conversation a step), past its first gradient step, and a job
    of ``queued`` conversations waiting behind it."""
    running = client.sft_training_jobs.create_from_data(
        model_id=model_id, data=data, config={"batch_size": 1, "learning_rate": 1e-6}
    )
    waiting = client.sft_training_jobs.create_from_data(model_id=model_id, data=data[:queued])
    wait_for_event(client, running.id, "gradient_step")
    return running, waiting


def test_cancel_queued_and_running_jobs_while_the_server_answers(server: LocalServer) -> None:
    client = server.client()
    model = new_model(client, "cancel")
    data = [reverse.conversation(w) for w in reverse.sample_words(3000, seed=2)]
    running, queued = running_and_queued(client, model.id, data, 4)
    assert client.health().status == "ok"  # answers while training
    assert queued.refresh().status == "queued"  # jobs of one model run in order
    assert queued.cancel().status == "cancelled"
    assert running.cancel().status in ("running", "cancelled")
    with pytest.raises(TrainingJobFailed, match="cancelled"):
        running.wait(progress=False)
    assert running.refresh().status == "cancelled"
    for job in (running, queued):
        assert [e.type for e in job_events(client, job.id)][-1] == "training_failed"
    assert running.cancel().status == "cancelled"  # idempotent
    assert [c.step for c in client.models.checkpoints.list(model.id)] == [0]


def test_jobs_are_private_to_their_user(server: LocalServer) -> None:
    client = server.client()
    model = new_model(client, "private")
    job = client.sft_training_jobs.create_from_data(model_id=model.id, data=[reverse.conversation("cat")])
    job.wait(progress=False)
    other = server.client(server.new_user_key("training-other"))
    with pytest.raises(tk.client.NotFoundError):
        other.training_jobs.retrieve(job.id)
    with pytest.raises(tk.client.NotFoundError):
        other.training_jobs.events.list(job.id)
    with pytest.raises(tk.client.NotFoundError):
        other.training_jobs.cancel(job.id)
    assert other.training_jobs.list().data == []


async def test_async_handle_waits_and_follows_events(server: LocalServer) -> None:
    async with server.async_client() as client:
        name = f"async-job-{uuid.uuid4().hex[:8]}"
        model = await client.models.create(project="tests-training", name=name, base_model=BASE)
        job = await client.sft_training_jobs.create_from_data(
            model_id=model.id, data=[reverse.conversation("cat")] * 4, config={"batch_size": 2}
        )
        checkpoint = await job.wait(progress=False)
        assert checkpoint.step == 1
        types = [e.type async for e in job.events()]
        assert types == ["training_started", "gradient_step", "gradient_step", "training_ended"]
        assert (await job.refresh()).status == "succeeded"


def test_kill_during_a_job_fails_it_on_restart_without_a_checkpoint(fresh_server: LocalServer) -> None:
    client = fresh_server.client()
    model = new_model(client, "kill")
    data = [reverse.conversation(w) for w in reverse.sample_words(3000, seed=3)]
    running, queued = running_and_queued(client, model.id, data, 2)
    fresh_server.kill()
    client.close()
    fresh_server.start()
    client = fresh_server.client()
    job = client.training_jobs.retrieve(running.id)
    assert (job.status, job.error) == (
        "failed",
        "The server stopped while this job was running; no checkpoint was written. Start it again.",
    )
    events = job_events(client, running.id)
    assert events[-1].type == "training_failed" and events[-1].data["error_message"] == job.error
    assert sum(e.type in ("training_ended", "training_failed") for e in events) == 1
    # the queued job runs after the restart and writes step 1; no folder is left for the killed job
    after = wait_job(client, queued.id)
    assert after.status == "succeeded" and after.result_step == 1
    folders = sorted(p.name for p in (fresh_server.data_dir / "checkpoints" / model.id).iterdir())
    assert folders == ["step1", "step1.optimizer.pt"]  # the latest step keeps its optimizer state

    # a clean stop (SIGTERM) fails the running job at once and keeps the queued one for the next start
    running, queued = running_and_queued(client, model.id, data, 2)
    client.close()
    fresh_server.restart()
    client = fresh_server.client()
    assert client.training_jobs.retrieve(running.id).status == "failed"
    assert wait_job(client, queued.id).result_step == 2


def test_events_of_unknown_job_404(server: LocalServer) -> None:
    with server.http() as http:
        for path in ("", "/events"):
            assert http.get(f"/v1/preview/training-jobs/nope{path}").status_code == 404
        assert http.post("/v1/preview/training-jobs/nope/cancel").status_code == 404
