"""Training jobs as ART sends them, over loopback HTTP: ART 0.5.23's RL body (every key, explicit
nulls) and SFT job after its upload, every experimental config key training, and extreme finite
rewards that must never make NaN weights."""

from __future__ import annotations

import json
import math
import time

import pytest
import torch
from safetensors.torch import load_file

import toolkit as tk
from conftest import LocalServer
from support.art_payloads import ART_0_5_23_CONFIG, ART_0_5_23_TRAIN_LINES, art_0_5_23_sft_job
from support.training_helpers import (
    answer_logprob,
    answer_trajectory,
    choice,
    job_events,
    new_model,
    prompt,
    rewarded_group,
    scored_answer,
    served,
    wait_job,
)
from toolkit.client.jobs import TrainingJobFailed


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
    step = next(e.data for e in job_events(client, job.id) if e.type == "gradient_step")
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
    group = rewarded_group(client, base)
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
    checkpoint = job.wait(progress=False)
    steps = [e.data for e in job_events(client, job.id) if e.type == "gradient_step"]
    assert len(steps) == 1  # both trajectories fit in 80 tokens
    assert (
        math.isfinite(steps[0]["loss"]) and math.isfinite(steps[0]["grad_norm"]) and steps[0]["grad_norm"] > 0
    )
    assert checkpoint.trained and checkpoint.metrics["data/step_num_gradient_steps"] == 1
    assert steps[0]["learning_rate"] == pytest.approx(2e-4)  # lr x 2 trajectories ** 1
    assert steps[0]["kl_policy_ref"] == pytest.approx(0.0, abs=1e-6)  # policy == reference (step 0)
    assert steps[0]["loss/importance_ratio_mean"] == pytest.approx(1.0, abs=1e-4)  # recomputed logprobs
    bad = {"kl_penalty_coef": 0.1, "kl_penalty_reference_step": 5}
    with pytest.raises(tk.client.UnprocessableEntityError):
        client.training_jobs.create(model_id=model.id, trajectory_groups=[group], experimental_config=bad)
