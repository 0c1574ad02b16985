"""The job seed (``experimental_config.seed``, an extension) over HTTP: two models trained by the same
job with the same seed have byte-identical checkpoint files; another seed gives other files (SFT data
order, RL minibatch order of every pass, a fresh LoRA adapter's initialisation); without a seed the
job does what it did before seeds existed."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import torch

from conftest import LocalServer
from toolkit.rollouts import gather
from toolkit.server.engine.random_models import random_model
from toolkit.server.training import lora, trainer
from toolkit.server.training.sequences import Sample
from toolkit.tasks import reverse
from toolkit.types.training import LoRAConfig, Trajectory, TrajectoryGroup

BASE = "toolkit/tiny-chat-1m"
WORDS = reverse.sample_words(12, seed=4)


def model(server: LocalServer, **settings: Any) -> str:
    with server.http() as http:
        body = {"project": "tests-seed", "name": f"s-{uuid.uuid4().hex[:8]}", "base_model": BASE, **settings}
        response = http.post("/v1/preview/models", json=body)
        assert response.status_code == 200, response.text
        return str(response.json()["id"])


def digests(server: LocalServer, model_id: str, step: int) -> dict[str, str]:
    """sha256 of each weight file of the checkpoint (``*.safetensors``), as the files route lists them."""
    with server.http() as http:
        listing = http.get(f"/v1/preview/models/{model_id}/checkpoints/{step}/files").json()
    return {f["name"]: f["sha256"] for f in listing["files"] if f["name"].endswith(".safetensors")}


def sft(server: LocalServer, seed: int | None, **settings: Any) -> dict[str, str]:
    client = server.client()
    model_id = model(server, **settings)
    experimental = {} if seed is None else {"seed": seed}
    job = client.sft_training_jobs.create_from_data(
        model_id=model_id,
        data=[reverse.conversation(w) for w in WORDS],
        config={"batch_size": 4, "learning_rate": 3e-3},
        experimental_config=experimental,
    )
    assert job.wait(progress=False).step == 1
    found = digests(server, model_id, 1)
    assert found
    return found


@pytest.mark.parametrize("settings", [{}, {"lora_config": {"rank": 4, "alpha": 8}}], ids=["full", "lora"])
def test_the_same_sft_job_and_seed_give_byte_identical_checkpoints(
    server: LocalServer, settings: dict[str, Any]
) -> None:
    first = sft(server, 7, **settings)
    assert sft(server, 7, **settings) == first
    other = sft(server, 8, **settings)
    assert other.keys() == first.keys() and all(other[name] != first[name] for name in first)
    assert sft(server, None, **settings) == sft(server, None, **settings)


def test_a_seed_draws_a_fresh_adapter_of_its_own(server: LocalServer) -> None:
    """RL jobs on fresh adapters (one pass, then two passes of several minibatches)."""
    client = server.client()
    groups = gather(["cat", "dog"], reverse.rollout(client, BASE), group_size=3, progress=False, seed=1)
    groups = [
        TrajectoryGroup(
            trajectories=[t.model_copy(update={"reward": float(i)}) for i, t in enumerate(g.trajectories)]
        )
        for g in groups
    ]

    def rl(seed: int | None, **config: Any) -> dict[str, str]:
        model_id = model(server, lora_config={"rank": 4, "alpha": 8})
        experimental = {
            "ppo": True,
            "learning_rate": 1e-3,
            **config,
            **({} if seed is None else {"seed": seed}),
        }
        job = client.training_jobs.create(
            model_id=model_id, trajectory_groups=groups, experimental_config=experimental
        )
        assert job.wait(progress=False).step == 1
        return digests(server, model_id, 1)

    first = rl(3)
    assert rl(3) == first and rl(4) != first
    several = {"num_iterations": 2, "packed_sequence_length": 64}  # passes of several minibatches
    assert rl(5, **several) == rl(5, **several)


def scored(trajectories: list[Trajectory]) -> list[Trajectory]:
    """Rewards 0, 1, 2, ... within a group, so that RL has advantages."""
    return [t.model_copy(update={"reward": float(i)}) for i, t in enumerate(trajectories)]


def test_the_adapter_is_drawn_from_the_job_seed() -> None:
    def a_matrices(seed: int) -> list[torch.Tensor]:
        adapter = lora.attach(random_model("qwen3"), LoRAConfig(rank=4), BASE, seed)
        return [p.detach().clone() for n, p in adapter.named_parameters() if "lora_A" in n]

    fixed = a_matrices(lora.adapter_seed(None))
    assert all(torch.equal(a, b) for a, b in zip(fixed, a_matrices(0), strict=True))
    seeded = a_matrices(lora.adapter_seed(1))
    assert all(torch.equal(a, b) for a, b in zip(seeded, a_matrices(lora.adapter_seed(1)), strict=True))
    assert not any(torch.equal(a, b) for a, b in zip(seeded, fixed, strict=True))


def test_a_seed_outside_int64_is_a_422_and_creates_no_job(server: LocalServer) -> None:
    model_id = model(server)
    with server.http() as http:
        response = http.post(
            "/v1/preview/training-jobs",
            json={"model_id": model_id, "trajectory_groups": [], "experimental_config": {"seed": 2**63}},
        )
        assert response.status_code == 422
        assert response.json()["detail"][0]["loc"] == ["body", "experimental_config", "seed"]
        assert http.get("/v1/preview/training-jobs", params={"model_id": model_id}).json() == []


def test_without_a_seed_the_order_and_the_adapter_are_the_fixed_ones() -> None:
    samples = [Sample(tokens=[i, i + 1], mask=[False, True]) for i in range(10)]
    assert trainer.sft_batches(samples, 4) == [samples[0:4], samples[4:8], samples[8:10]]
    shuffled = trainer.sft_batches(samples, 4, job_seed=1)
    assert sorted(id(s) for b in shuffled for s in b) == sorted(id(s) for s in samples)
    assert shuffled != trainer.sft_batches(samples, 4) and shuffled == trainer.sft_batches(samples, 4, 1)
    assert trainer.sft_batches(samples, 4, 1, base_step=2) != shuffled  # each job of a model anew
    assert [trainer.pass_seed(3, i, None) for i in range(3)] == [3, 4, 5]
    assert trainer.pass_seed(3, 0, 9) != trainer.pass_seed(3, 1, 9) != trainer.pass_seed(4, 1, 9)
    assert lora.adapter_seed(None) == lora.ADAPTER_SEED == 0 and lora.adapter_seed(1) != 0
