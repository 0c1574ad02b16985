"""The RL health metrics a job emits per gradient step (TRL names): over loopback HTTP after a short
real RL job on completions cut by ``max_tokens``, and :func:`rollout_metrics` on hand-made groups."""

from __future__ import annotations

from typing import Any

import pytest

import toolkit as tk
from conftest import LocalServer
from support.training_helpers import job_events, new_model, prompt, scored_answer, served
from toolkit.rollouts import choice_from_completion
from toolkit.server.training.rollout_metrics import rollout_metrics
from toolkit.types.training import TrajectoryGroup

MAX_TOKENS = 4


def _truncated(client: tk.Client, model: str, word: str, reward: float, correct: int) -> dict[str, Any]:
    """A real completion the engine had to stop at ``max_tokens`` (EOS ignored)."""
    completion = client.chat.completions.create(
        model=model,
        messages=prompt(word),
        max_tokens=MAX_TOKENS,
        ignore_eos=True,
        logprobs=True,
        return_token_ids=True,
    )
    choice = choice_from_completion(completion).model_dump(mode="json")
    assert choice["finish_reason"] == "length"
    return {
        "messages_and_choices": [*prompt(word), choice],
        "reward": reward,
        "metrics": {"correct": correct, "format": 1.0},
    }


def test_rl_job_emits_health_metrics_per_step(server: LocalServer) -> None:
    client = server.client()
    model = new_model(client, "health")
    base = served(model, 0)
    varied = {
        "trajectories": [_truncated(client, base, "cat", 1.0, 1), _truncated(client, base, "cat", 0.0, 0)]
    }
    flat = {
        "trajectories": [_truncated(client, base, "dog", 0.5, 0), _truncated(client, base, "dog", 0.5, 0)]
    }
    config = {"ppo": True, "learning_rate": 1e-4, "kl_penalty_coef": 0.1}
    job = client.training_jobs.create(
        model_id=model.id, trajectory_groups=[varied, flat], experimental_config=config
    )
    checkpoint = job.wait(progress=False)

    events = job_events(client, job.id)
    assert events[0].data["config"]["ppo"] is True and events[0].data["config"]["kl_penalty_coef"] == 0.1
    steps = [e.data for e in events if e.type == "gradient_step"]
    assert steps
    for data in steps:
        assert data["entropy"] > 0
        assert data["frac_reward_zero_std"] == 0.5  # the flat group: 2 of the 4 trajectories
        assert data["completions/clipped_ratio"] == 1.0
        lengths = (
            data["completions/min_length"],
            data["completions/mean_length"],
            data["completions/max_length"],
        )
        assert lengths == (MAX_TOKENS, MAX_TOKENS, MAX_TOKENS)
        assert "completions/mean_terminated_length" not in data  # every completion was cut
        assert (data["reward_min"], data["reward_max"]) == (0.0, 1.0)
        assert data["reward_std"] == pytest.approx(0.3535533, rel=1e-5)  # population std of 1, 0, .5, .5
        assert data["rewards/correct/mean"] == 0.25 and data["rewards/format/std"] == 0.0
        assert data["kl"] == pytest.approx(0.0, abs=1e-4)  # the policy is its reference (step 0)
        for side in ("low", "high", "region"):
            assert data[f"clip_ratio/{side}_mean"] == 0.0  # one pass over fresh samples: nothing to clip
        assert data["timing_s/step"] > 0 and data["throughput/tokens_per_s"] > 0
        assert data["timing_s/forward_backward"] <= data["timing_s/step"]
    assert checkpoint.metrics["frac_reward_zero_std"] == 0.5
    assert checkpoint.metrics["completions/clipped_ratio"] == 1.0
    assert checkpoint.metrics["loss/entropy"] > 0


def _answer(client: tk.Client, model: str, answer: str, reward: float) -> dict[str, Any]:
    """A fixed answer to "reverse cat" with the served model's logprobs of its tokens (no sampling:
    the same data on every run)."""
    head, ids, logprobs = scored_answer(client, model, "cat", answer)
    content = [{"token": f"token_id:{t}", "logprob": lp} for t, lp in zip(ids, logprobs, strict=True)]
    choice = {
        "message": {"role": "assistant", "content": answer},
        "finish_reason": "length",
        "prompt_token_ids": head,
        "token_ids": ids,
        "logprobs": {"content": content},
    }
    return {"messages_and_choices": [*prompt("cat"), choice], "reward": reward}


def test_a_second_pass_over_the_samples_reports_clipping_and_kl(server: LocalServer) -> None:
    """``num_iterations`` 2: the second pass compares the policy the first pass moved with the logprobs
    the samples came with, so ratios leave the band the way the advantages pushed them (clipped
    tokens: high where A > 0, low where A < 0) and the policy is no longer its KL reference; the
    first pass is on-policy (no clipping, KL 0)."""
    client = server.client()
    model = new_model(client, "second-pass")
    base = served(model, 0)
    group = {"trajectories": [_answer(client, base, "tac", 1.0), _answer(client, base, "cat", 0.0)]}
    config = {"ppo": True, "learning_rate": 1e-3, "kl_penalty_coef": 0.1, "num_iterations": 2}
    job = client.training_jobs.create(
        model_id=model.id, trajectory_groups=[group], experimental_config=config
    )
    checkpoint = job.wait(progress=False)
    steps = [e.data for e in job_events(client, job.id) if e.type == "gradient_step"]
    assert len(steps) == 2  # one minibatch per pass
    first, second = steps
    assert first["kl"] == pytest.approx(0.0, abs=1e-4) and first["clip_ratio/region_mean"] == 0.0
    assert second["kl"] > 1e-3
    assert second["clip_ratio/high_mean"] > 0 and second["clip_ratio/low_mean"] > 0
    for data in steps:  # a token is clipped low or high, never both
        assert data["clip_ratio/region_mean"] == pytest.approx(
            data["clip_ratio/low_mean"] + data["clip_ratio/high_mean"], abs=1e-6
        )
        assert data["clip_ratio/low_min"] == data["clip_ratio/low_mean"]
        assert data["clip_ratio/high_max"] == data["clip_ratio/high_mean"]
    metrics = checkpoint.metrics
    assert metrics["clip_ratio/low_min"] == first["clip_ratio/low_mean"]  # the least of the two steps
    assert metrics["clip_ratio/high_max"] == second["clip_ratio/high_mean"]  # the largest
    assert metrics["kl"] == pytest.approx((first["kl"] + second["kl"]) / 2)


def _group(rewards: list[float], finish: str = "stop", tokens: int = 3) -> TrajectoryGroup:
    choice = {
        "message": {"role": "assistant", "content": "x"},
        "finish_reason": finish,
        "token_ids": [1] * tokens,
    }
    return TrajectoryGroup.model_validate(
        {
            "trajectories": [
                {"messages_and_choices": [choice], "reward": r, "metrics": {"ok": r}} for r in rewards
            ]
        }
    )


def test_rollout_metrics_of_hand_made_groups() -> None:
    metrics = rollout_metrics(
        [_group([1.0, 0.0, 1.0]), _group([2.0, 2.0], "length", 7), _group([5.0], tokens=5)]
    )
    assert metrics["frac_reward_zero_std"] == pytest.approx(3 / 6)  # the flat pair and the single one
    assert metrics["completions/clipped_ratio"] == pytest.approx(2 / 6)
    assert (metrics["completions/min_length"], metrics["completions/max_length"]) == (3.0, 7.0)
    assert metrics["completions/mean_length"] == pytest.approx((3 * 3 + 7 * 2 + 5) / 6)
    terminated = [metrics[f"completions/{k}_terminated_length"] for k in ("min", "mean", "max")]
    assert terminated == [3.0, pytest.approx((3 * 3 + 5) / 4), 5.0]  # the two cut at 7 left out
    assert (metrics["reward_min"], metrics["reward_max"]) == (0.0, 5.0)
    assert metrics["rewards/ok/mean"] == pytest.approx(11 / 6)
    without_choices = TrajectoryGroup.model_validate(
        {"trajectories": [{"messages_and_choices": [], "reward": 1}]}
    )
    assert "completions/clipped_ratio" not in rollout_metrics([without_choices])
