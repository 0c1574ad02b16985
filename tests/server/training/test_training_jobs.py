"""RL and SFT jobs over loopback HTTP: they train the served model (toward the rewarded answer, off
policy with num_iterations, SFT on message lists with its config), emit the exact event sequence
(paginated past 100 events) and end with a checkpoint even with nothing to train, one that says so
(the other ways of training nothing: test_training_untrained.py)."""

from __future__ import annotations

import json

import pytest

import toolkit as tk
from conftest import LocalServer
from support.training_helpers import (
    BASE,
    answer_logprob,
    answer_trajectory,
    job_events,
    new_model,
    rewarded_group,
    served,
)
from toolkit.client.training import op_create_sft_job
from toolkit.tasks import reverse


def test_rl_job_moves_the_served_model_toward_the_rewarded_answer(server: LocalServer) -> None:
    client = server.client()
    model = new_model(client, "rl")
    base = served(model, 0)
    group = rewarded_group(client, base, copies=2)
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

    events = job_events(client, job.id)
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
    assert events[-1].data == {"step": 1, "checkpoint_id": checkpoint.id, "trained": True}
    listed = {c.step: c for c in client.models.checkpoints.list(model.id)}
    assert listed[1].id == checkpoint.id
    assert (listed[0].trained, listed[1].trained, checkpoint.trained) == (None, True, True)
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
    group = rewarded_group(client, base)
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
    events = job_events(client, job.id)
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
    events = job_events(client, job.id)
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
    started = job_events(client, job.id)[0]
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


def test_nothing_trainable_ends_advances_the_step_and_says_so(server: LocalServer) -> None:
    """As ART's backend, the step advances (step 1 is the base model unchanged); unlike a silent
    success, a warning event names why, ``training_ended`` and the checkpoint say ``trained: false``
    and ``wait()`` warns in one line."""
    client = server.client()
    model = new_model(client, "flat")
    base = served(model, 0)
    same = [answer_trajectory(client, base, "dog", "god", 0.5) for _ in range(3)]
    job = client.training_jobs.create(model_id=model.id, trajectory_groups=[{"trajectories": same}])
    with pytest.warns(tk.TrainingJobWarning) as told:
        checkpoint = job.wait(progress=False)
    assert checkpoint.step == 1 and checkpoint.trained is False
    assert checkpoint.metrics["data/step_num_groups_trainable"] == 0
    assert checkpoint.metrics["data/step_num_gradient_steps"] == 0
    events = job_events(client, job.id)
    assert [e.type for e in events] == ["training_started", "warning", "training_ended"]
    assert events[0].data["num_sequences"] == 0
    message = (
        "Nothing trained: every group's rewards are equal (1 group), so every advantage is 0."
        " Step 1 is step 0's model unchanged (its checkpoint says trained: false)."
    )
    assert events[1].data == {"code": "nothing_trained", "message": message}
    assert events[2].data == {"step": 1, "checkpoint_id": checkpoint.id, "trained": False}
    assert [str(w.message) for w in told if w.category is tk.TrainingJobWarning] == [
        f"training job {job.id}: {message}"
    ]
    assert [c.trained for c in client.models.checkpoints.list(model.id)] == [None, False]
