"""RL and SFT jobs over loopback HTTP: they train the served model, emit the exact event sequence,
fail with readable messages, can be cancelled, and survive a server killed mid-job."""

from __future__ import annotations

import json
import time
import uuid

import pytest
import torch
from art_payloads import ART_0_5_23_CONFIG, ART_0_5_23_TRAIN_LINES, art_0_5_23_sft_job
from safetensors.torch import load_file
from training_helpers import (
    BASE,
    answer_logprob,
    answer_trajectory,
    choice,
    new_model,
    prompt,
    scored_answer,
    served,
    wait_for_event,
    wait_job,
)

import toolkit as tk
from conftest import LocalServer
from toolkit.client.jobs import TrainingJobFailed, TrainingJobHandle
from toolkit.client.training import op_create_sft_job
from toolkit.tasks import reverse
from toolkit.types.training import TrainingJobEvent


def _events(client: tk.Client, job_id: str) -> list[TrainingJobEvent]:
    return list(client.training_jobs.events.list(job_id, limit=100))


def test_rl_job_moves_the_served_model_toward_the_rewarded_answer(server: LocalServer) -> None:
    client = server.client()
    model = new_model(client, "rl")
    base = served(model, 0)
    group = {
        "trajectories": [
            answer_trajectory(client, base, "cat", "tac", 1.0),
            answer_trajectory(client, base, "cat", "xyz", 0.0),
            answer_trajectory(client, base, "cat", "tac", 1.0),
            answer_trajectory(client, base, "cat", "xyz", 0.0),
        ]
    }
    before = {a: answer_logprob(client, base, "cat", a) for a in ("tac", "xyz")}
    config = {"ppo": True, "learning_rate": 1e-3, "packed_sequence_length": 40}
    job = client.training_jobs.create(
        model_id=model.id, trajectory_groups=[group], experimental_config=config
    )
    checkpoint = job.wait(progress=False)
    assert checkpoint.step == 1

    after = {a: answer_logprob(client, served(model, 1), "cat", a) for a in ("tac", "xyz")}
    assert after["tac"] > before["tac"] + 0.1
    assert after["xyz"] < before["xyz"] - 0.1

    events = _events(client, job.id)
    types = [e.type for e in events]
    n = events[0].data["num_sequences"]
    assert n == 4  # one trajectory of ~34 tokens per minibatch of at most 40 tokens
    assert events[0].data["warnings"] == [  # 1e-3 is far above what works for the built-in model
        f"The learning rate of this job reaches 0.001, far above the range known to work for RL on {BASE}:"
        " 1e-4 to 2e-4 trained stably, 0.0003 and more collapsed the model in measurements. Use 1e-4 to 2e-4."
    ]
    assert types == ["training_started", *["gradient_step"] * n, "training_ended"]
    for event in events[1:-1]:
        assert all(isinstance(v, int | float) for v in event.data.values())
        for key in ("loss", "grad_norm", "learning_rate", "entropy", "reward", "reward_std_dev"):
            assert key in event.data
        assert event.data["loss/clipped_token_fraction"] >= 0
        assert event.data["reward"] == 0.5 and event.data["num_trainable_tokens"] == 4
    assert events[-1].data == {"step": 1, "checkpoint_id": checkpoint.id}
    listed = {c.step: c for c in client.models.checkpoints.list(model.id)}
    assert listed[1].id == checkpoint.id
    assert listed[1].metrics["train/reward"] == 0.5
    assert listed[1].metrics["data/step_num_gradient_steps"] == 4

    state = job.refresh()
    assert (state.status, state.kind, state.base_step, state.result_step) == ("succeeded", "rl", 0, 1)
    assert state.checkpoint_id == checkpoint.id and state.num_sequences == 4 and state.error is None
    assert state.created_at is not None and state.started_at is not None and state.finished_at is not None
    assert state.created_at <= state.started_at <= state.finished_at


def test_num_iterations_replays_every_minibatch_off_policy(server: LocalServer) -> None:
    client = server.client()
    model = new_model(client, "rl-iterations")
    base = served(model, 0)
    group = {
        "trajectories": [
            answer_trajectory(client, base, "cat", "tac", 1.0),
            answer_trajectory(client, base, "cat", "xyz", 0.0),
        ]
    }
    config = {
        "ppo": True,
        "learning_rate": 1e-3,
        "packed_sequence_length": 40,
        "num_iterations": 3,
        "precalculate_logprobs": True,  # the old logprobs are the trainer's own before the step
    }
    job = client.training_jobs.create(
        model_id=model.id, trajectory_groups=[group], experimental_config=config
    )
    checkpoint = job.wait(progress=False)
    events = _events(client, job.id)
    steps = [e.data for e in events if e.type == "gradient_step"]
    assert events[0].data["num_sequences"] == len(steps) == 6  # 2 minibatches of one trajectory, 3 passes
    assert events[0].data["config"]["num_iterations"] == 3
    assert steps[0]["loss/importance_ratio_mean"] == pytest.approx(1.0, abs=1e-4)  # before any update
    assert any(abs(s["loss/importance_ratio_mean"] - 1.0) > 1e-3 for s in steps[2:])  # the replays are not
    assert checkpoint.step == 1
    metrics = {c.step: c.metrics for c in client.models.checkpoints.list(model.id)}[1]
    assert metrics["data/step_num_gradient_steps"] == 6
    with pytest.raises(tk.client.UnprocessableEntityError):
        client.training_jobs.create(
            model_id=model.id, trajectory_groups=[group], experimental_config={"num_iterations": 0}
        )


def test_sft_job_trains_assistant_tokens_from_message_lists(server: LocalServer) -> None:
    client = server.client()
    model = new_model(client, "sft")
    before = answer_logprob(client, served(model, 0), "cat", "tac")
    data = [reverse.conversation("cat") for _ in range(16)]
    job = client.sft_training_jobs.create_from_data(
        model_id=model.id, data=data, config={"batch_size": 4, "learning_rate": 1e-3}
    )
    checkpoint = job.wait(progress=False)
    assert checkpoint.step == 1
    assert checkpoint.metrics["data/step_num_gradient_steps"] == 4
    assert checkpoint.metrics["sft/num_trainable_tokens"] == 4 * 4  # "tac" + end of turn, 4 per batch
    after = answer_logprob(client, served(model, 1), "cat", "tac")
    assert after > before + 1.0
    events = _events(client, job.id)
    assert [e.type for e in events] == ["training_started", *["gradient_step"] * 4, "training_ended"]
    assert events[1].data["learning_rate"] == 1e-3
    assert job.refresh().kind == "sft"


def test_sft_experimental_config(server: LocalServer) -> None:
    """The chunk size is honoured, unknown keys are named in the first event, wrong types are a 422."""
    client = server.client()
    model = new_model(client, "sft-exp")
    data = "".join(json.dumps({"messages": reverse.conversation(w)}) + "\n" for w in ("cat", "dog"))
    artifact = client.artifacts.upload(project="tests-training", files={"train.jsonl": data})
    job = client.sft_training_jobs.create(
        model_id=model.id,
        training_data_url=artifact.url,
        config={"batch_size": 2},
        experimental_config={"logprob_calculation_chunk_size": 3, "future_key": True},
    )
    assert job.wait(progress=False).step == 1
    started = _events(client, job.id)[0]
    assert started.data == {
        "num_sequences": 1,
        "warnings": ["experimental_config keys this server does not know were ignored: future_key."],
    }
    assert "experimental_config" not in op_create_sft_job(model.id, artifact.url, None).json  # as ART sends
    with pytest.raises(tk.client.UnprocessableEntityError, match="logprob_calculation_chunk_size"):
        client.sft_training_jobs.create(
            model_id=model.id,
            training_data_url=artifact.url,
            experimental_config={"logprob_calculation_chunk_size": 0},
        )


def test_events_paginate_over_more_than_100(server: LocalServer) -> None:
    client = server.client()
    model = new_model(client, "pages")
    data = [reverse.conversation(w) for w in reverse.sample_words(105, seed=1)]
    job = client.sft_training_jobs.create_from_data(
        model_id=model.id, data=data, config={"batch_size": 1, "learning_rate": 1e-6}
    )
    job.wait(progress=False)
    first = client.training_jobs.events.list(job.id, limit=100)
    assert len(first.data) == 100 and first.has_more
    events = list(first)
    assert len(events) == 107 and len({e.id for e in events}) == 107
    assert [e.type for e in events] == ["training_started", *["gradient_step"] * 105, "training_ended"]
    assert [e.id for e in client.training_jobs.events.list(job.id)] == [e.id for e in events]  # pages of 20
    tail = client.training_jobs.events.list(job.id, after=events[101].id, limit=100)
    assert [e.id for e in tail.data] == [e.id for e in events[102:]] and not tail.has_more
    assert (first.first_id, first.last_id) == (events[0].id, events[99].id)
    with server.http() as http:
        for params in ({"limit": 0}, {"limit": 101}, {"after": "nope"}):
            assert http.get(f"/v1/preview/training-jobs/{job.id}/events", params=params).status_code == 422


def test_nothing_trainable_still_ends_and_advances_the_step(server: LocalServer) -> None:
    client = server.client()
    model = new_model(client, "flat")
    base = served(model, 0)
    same = [answer_trajectory(client, base, "dog", "god", 0.5) for _ in range(3)]
    job = client.training_jobs.create(model_id=model.id, trajectory_groups=[{"trajectories": same}])
    checkpoint = job.wait(progress=False)
    assert checkpoint.step == 1
    assert checkpoint.metrics["data/step_num_groups_trainable"] == 0
    events = _events(client, job.id)
    assert [e.type for e in events] == ["training_started", "training_ended"]
    assert events[0].data["num_sequences"] == 0


def test_art_0_5_23_body_with_every_key_and_explicit_nulls(server: LocalServer) -> None:
    client = server.client()
    model = new_model(client, "art")
    head, ids, lps = scored_answer(client, served(model, 0), "cat", "tac")
    rewarded = choice(head, ids, lps, "tac")
    rewarded["art_completion_tokens"] = len(ids) + 1
    body = {
        "model_id": model.id,
        "trajectory_groups": [
            {
                "trajectories": [
                    {
                        "messages_and_choices": [
                            {"role": "system", "content": "You reverse."},
                            *prompt("cat"),
                            rewarded,
                        ],
                        "reward": 1.0,
                        "metrics": {"correct": 1},
                        "metadata": {"scenario_id": "s1"},
                    },
                    {
                        "messages_and_choices": [
                            {"role": "system", "content": "You reverse."},
                            *prompt("cat"),
                            rewarded,
                        ]
                    },
                ],
                "exceptions": [
                    {
                        "type": "<class 'ValueError'>",
                        "message": "rollout crashed",
                        "traceback": "ValueError: rollout crashed\n",
                    }
                ],
                "metadata": {"prompt_id": 7},
            }
        ],
        "experimental_config": ART_0_5_23_CONFIG,
    }
    assert len(body["experimental_config"]) == 25  # type: ignore[arg-type]
    with server.http() as http:
        created = http.post("/v1/preview/training-jobs", json=body)
        assert created.status_code == 200 and set(created.json()) == {"id"}
        job = wait_job(client, created.json()["id"])
        assert job.status == "succeeded" and job.result_step == 1
        events = http.get(f"/v1/preview/training-jobs/{job.id}/events").json()["data"]
        assert events[0]["data"]["num_sequences"] == len(events) - 2
        assert "warnings" not in events[0]["data"]  # no warning for ART's own keys
        steps = [e for e in events if e["type"] == "gradient_step"]
        assert steps and all(e["data"]["learning_rate"] == 1e-05 for e in steps)
        assert steps[0]["data"]["exception_rate"] == pytest.approx(1 / 3)
        # a key of a newer ART is accepted and named in the first event; a known key must be valid
        newer = {**body, "experimental_config": {**ART_0_5_23_CONFIG, "epsilonn": 0.1, "zeta": None}}
        created = http.post("/v1/preview/training-jobs", json=newer)
        assert created.status_code == 200, created.text
        assert wait_job(client, created.json()["id"]).status == "succeeded"
        first = http.get(f"/v1/preview/training-jobs/{created.json()['id']}/events").json()["data"][0]
        assert first["type"] == "training_started"
        assert first["data"]["warnings"] == [
            "experimental_config keys this server does not know were ignored: epsilonn, zeta."
        ]
        wrong = {**body, "experimental_config": {**ART_0_5_23_CONFIG, "epsilon": "wide"}}
        rejected = http.post("/v1/preview/training-jobs", json=wrong)
        assert rejected.status_code == 422
        assert [item["loc"] for item in rejected.json()["detail"]] == [
            ["body", "experimental_config", "epsilon"]
        ]


def test_extreme_finite_rewards_never_make_nan_weights(server: LocalServer) -> None:
    client = server.client()
    model = new_model(client, "extreme")
    base = served(model, 0)

    def group(*rewards: float) -> dict[str, object]:
        pairs = zip(["tac", "xyz", "tca"][: len(rewards)], rewards, strict=True)
        return {"trajectories": [answer_trajectory(client, base, "cat", a, r) for a, r in pairs]}

    before = answer_logprob(client, base, "cat", "tac")
    job = client.training_jobs.create(
        model_id=model.id,
        trajectory_groups=[group(1e308, -1e308)],
        experimental_config={"learning_rate": 1e-3},
    )
    assert job.wait(progress=False).step == 1
    weights = load_file(server.data_dir / "checkpoints" / model.id / "step1" / "model.safetensors")
    assert all(bool(torch.isfinite(t).all()) for t in weights.values())
    assert answer_logprob(client, served(model, 1), "cat", "tac") > before  # advantages +1 / -1, as for 1 / 0
    step = next(e.data for e in _events(client, job.id) if e.type == "gradient_step")
    assert (step["reward"], step["reward_std_dev"]) == (0.0, 1e308)

    unscaled = {"scale_rewards": False}
    beyond = client.training_jobs.create(
        model_id=model.id, trajectory_groups=[group(1.7e308, -1.7e308, 1.7e308)], experimental_config=unscaled
    )
    with pytest.raises(TrainingJobFailed, match="group 0: its rewards are so far apart"):
        beyond.wait(progress=False)
    huge = client.training_jobs.create(
        model_id=model.id, trajectory_groups=[group(1e30, -1e30)], experimental_config=unscaled
    )
    with pytest.raises(TrainingJobFailed, match=r"gradient step 1: .* not a finite number, so no weights"):
        huge.wait(progress=False)
    assert [c.step for c in client.models.checkpoints.list(model.id)] == [0, 1]


def test_art_0_5_23_sft_job_after_its_upload(server: LocalServer) -> None:
    """What ART's train_sft() sends once its train.jsonl is uploaded: the job body, then its event
    loop (cursor after the last event other than training_started, float() of every gradient-step
    value) and the current step. ART uploads with the wandb SDK to W&B Artifacts, which this server
    does not serve (docs/training.md "ART's train_sft()"): here the file goes to /v1/preview/artifacts."""
    client = server.client()
    model = new_model(client, "art-sft")
    train = "".join(json.dumps(line) + "\n" for line in ART_0_5_23_TRAIN_LINES * 2)
    name = f"{model.name}-sft-data-0123abcd"  # ART's artifact name: <run name>-sft-data-<12 hex>
    with server.http() as http:
        upload = http.post(
            "/v1/preview/artifacts",
            data={"project": model.project, "entity": model.entity, "name": name},
            files=[("files", ("train.jsonl", train.encode()))],
        )
        assert upload.status_code == 200, upload.text
        url = upload.json()["url"]
        assert url == f"wandb-artifact:///{model.entity}/{model.project}/{name}:v0"  # what ART builds
        created = http.post("/v1/preview/sft-training-jobs", json=art_0_5_23_sft_job(model.id, url, 1))
        assert created.status_code == 200 and set(created.json()) == {"id"}
        events = f"/v1/preview/training-jobs/{created.json()['id']}/events"
        after: str | None = None
        started: list[dict[str, object]] = []
        handled: list[str] = []
        while not handled or handled[-1] not in ("training_ended", "training_failed"):
            time.sleep(0.1)
            for event in http.get(events, params={"after": after} if after else {}).json()["data"]:
                if event["type"] == "training_started":
                    started.append(event["data"])
                    continue  # ART does not move its cursor past training_started
                if event["type"] == "gradient_step":
                    assert all(isinstance(float(v), float) for v in event["data"].values())
                handled.append(event["type"])
                after = event["id"]
        assert started[0] == {"num_sequences": 2}  # 4 conversations, batch size 2
        assert handled == ["gradient_step", "gradient_step", "training_ended"]
        latest = http.get(f"/v1/preview/models/{model.id}/checkpoints", params={"limit": 1, "order": "desc"})
        assert [c["step"] for c in latest.json()["data"]] == [1]


def test_every_config_key_trains(server: LocalServer) -> None:
    """Non-default values of every loss key are accepted and the job trains (loss is finite)."""
    client = server.client()
    model = new_model(client, "keys")
    base = served(model, 0)
    group = {
        "trajectories": [
            answer_trajectory(client, base, "cat", "tac", 1.0),
            answer_trajectory(client, base, "cat", "xyz", 0.0),
        ]
    }
    config = {
        "advantage_balance": 0.3,
        "epsilon": 0.1,
        "epsilon_high": 0.3,
        "importance_sampling_level": "geometric_average",
        "kimi_k2_tau": 0.1,
        "kl_penalty_coef": 0.05,
        "kl_penalty_reference_step": 0,
        "kl_penalty_source": "current_learner",
        "learning_rate": 1e-4,
        "logprob_calculation_chunk_size": 7,
        "mask_prob_ratio": True,
        "max_negative_advantage_importance_sampling_weight": 2.0,
        "num_trajectories_learning_rate_multiplier_power": 1.0,
        "packed_sequence_length": 80,
        "ppo": True,
        "precalculate_logprobs": True,
        "scale_learning_rate_by_reward_std_dev": True,
        "scale_rewards": False,
        "truncated_importance_sampling": 2.0,
    }
    job = client.training_jobs.create(
        model_id=model.id, trajectory_groups=[group], experimental_config=config
    )
    job.wait(progress=False)
    steps = [e.data for e in _events(client, job.id) if e.type == "gradient_step"]
    assert len(steps) == 1  # both trajectories fit in 80 tokens
    assert steps[0]["learning_rate"] == pytest.approx(2e-4)  # lr x 2 trajectories ** 1
    assert steps[0]["kl_policy_ref"] == pytest.approx(0.0, abs=1e-6)  # policy == reference (step 0)
    assert steps[0]["loss/importance_ratio_mean"] == pytest.approx(1.0, abs=1e-4)  # recomputed logprobs
    bad = {"kl_penalty_coef": 0.1, "kl_penalty_reference_step": 5}
    with pytest.raises(tk.client.UnprocessableEntityError):
        client.training_jobs.create(model_id=model.id, trajectory_groups=[group], experimental_config=bad)


def test_untrainable_choices_fail_with_a_readable_message(server: LocalServer) -> None:
    client = server.client()
    model = new_model(client, "untrainable")
    base = served(model, 0)

    def run(config: dict[str, object] | None = None, **choice_kw: object) -> TrainingJobHandle:
        group = {
            "trajectories": [
                answer_trajectory(client, base, "cat", "tac", 1.0, **choice_kw),
                answer_trajectory(client, base, "cat", "xyz", 0.0, **choice_kw),
            ]
        }
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
    events = _events(client, failed.id)
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


def test_cancel_queued_and_running_jobs_while_the_server_answers(server: LocalServer) -> None:
    client = server.client()
    model = new_model(client, "cancel")
    data = [reverse.conversation(w) for w in reverse.sample_words(3000, seed=2)]
    running = client.sft_training_jobs.create_from_data(
        model_id=model.id, data=data, config={"batch_size": 1, "learning_rate": 1e-6}
    )
    queued = client.sft_training_jobs.create_from_data(model_id=model.id, data=data[:4])
    wait_for_event(client, running.id, "gradient_step")
    assert client.health().status == "ok"  # answers while training
    assert queued.refresh().status == "queued"  # jobs of one model run in order
    assert queued.cancel().status == "cancelled"
    assert running.cancel().status in ("running", "cancelled")
    with pytest.raises(TrainingJobFailed, match="cancelled"):
        running.wait(progress=False)
    assert running.refresh().status == "cancelled"
    for job in (running, queued):
        assert [e.type for e in _events(client, job.id)][-1] == "training_failed"
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
    running = client.sft_training_jobs.create_from_data(
        model_id=model.id, data=data, config={"batch_size": 1, "learning_rate": 1e-6}
    )
    queued = client.sft_training_jobs.create_from_data(model_id=model.id, data=data[:2])
    wait_for_event(client, running.id, "gradient_step")
    fresh_server.kill()
    client.close()
    fresh_server.start()
    client = fresh_server.client()
    job = client.training_jobs.retrieve(running.id)
    assert (job.status, job.error) == (
        "failed",
        "The server stopped while this job was running; no checkpoint was written. Start it again.",
    )
    events = list(client.training_jobs.events.list(running.id, limit=100))
    assert events[-1].type == "training_failed" and events[-1].data["error_message"] == job.error
    assert sum(e.type in ("training_ended", "training_failed") for e in events) == 1
    # the queued job runs after the restart and writes step 1; no folder is left for the killed job
    after = wait_job(client, queued.id)
    assert after.status == "succeeded" and after.result_step == 1
    folders = sorted(p.name for p in (fresh_server.data_dir / "checkpoints" / model.id).iterdir())
    assert folders == ["step1", "step1.optimizer.pt"]  # the latest step keeps its optimizer state

    # a clean stop (SIGTERM) fails the running job at once and keeps the queued one for the next start
    running = client.sft_training_jobs.create_from_data(
        model_id=model.id, data=data, config={"batch_size": 1, "learning_rate": 1e-6}
    )
    queued = client.sft_training_jobs.create_from_data(model_id=model.id, data=data[:2])
    wait_for_event(client, running.id, "gradient_step")
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
