"""The optimizer state is kept with the model: a job after a server restart (even ``kill -9``)
continues from the AdamW state the previous job left, exactly as if the server had kept running.
Only the latest checkpoint keeps its optimizer state, outside the adapter folder."""

from __future__ import annotations

import time
from typing import Any

import torch
from safetensors.torch import load_file

from conftest import LocalServer
from support.training_helpers import BASE
from toolkit.tasks import reverse
from toolkit.types.training import Model

DATA = [reverse.conversation(w) for w in ("cat", "dog", "sun", "map")]
CONFIG = {"batch_size": 2, "learning_rate": 5e-3}  # two gradient steps per job


def sft(srv: LocalServer, model: Model) -> int:
    with srv.client() as client:
        job = client.sft_training_jobs.create_from_data(model_id=model.id, data=DATA, config=CONFIG)
        return job.wait(progress=False).step


def optimizer(srv: LocalServer, model: Model, step: int) -> dict[str, Any]:
    state: dict[str, Any] = torch.load(
        srv.data_dir / "checkpoints" / model.id / f"step{step}.optimizer.pt", weights_only=True
    )
    return state


def files(srv: LocalServer, model: Model) -> list[str]:
    """The model's checkpoint files once the job that ended has dropped its base's optimizer state:
    that happens just after the new checkpoint's commit, which is when ``wait()`` returns."""
    folder = srv.data_dir / "checkpoints" / model.id
    deadline = time.monotonic() + 10
    while True:
        names = sorted(p.name for p in folder.iterdir())
        if sum(name.endswith(".optimizer.pt") for name in names) <= 1 or time.monotonic() > deadline:
            return names
        time.sleep(0.05)


def test_a_restart_between_two_jobs_resumes_the_optimizer(fresh_server: LocalServer) -> None:
    srv = fresh_server
    with srv.client() as client:
        steady, restarted = (
            client.models.create(project="resume", name=kind, base_model=BASE, lora_config={"rank": 4})
            for kind in ("steady", "restarted")
        )
    assert (sft(srv, steady), sft(srv, steady)) == (1, 2)  # the policy stays in memory between its jobs

    assert sft(srv, restarted) == 1
    assert files(srv, restarted) == ["step1", "step1.optimizer.pt"]
    srv.kill()
    srv.start()
    assert sft(srv, restarted) == 2
    assert files(srv, restarted) == ["step1", "step2", "step2.optimizer.pt"]  # the latest step's only

    kept, resumed = optimizer(srv, steady, 2), optimizer(srv, restarted, 2)
    assert kept["kind"] == resumed["kind"] == "sft"
    assert kept["names"] == resumed["names"] and all(".lora_" in name for name in kept["names"])
    states = resumed["optimizer"]["state"]
    assert len(states) == len(kept["names"]) == 4 * 7 * 2  # A and B of 7 layers in each of 4 blocks
    for index, state in states.items():
        assert float(state["step"]) == 4.0  # two jobs of two gradient steps, not two
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.allclose(state[key], kept["optimizer"]["state"][index][key], rtol=1e-5, atol=1e-9)
    adapters = [
        load_file(srv.data_dir / "checkpoints" / m.id / "step2" / "adapter_model.safetensors")
        for m in (steady, restarted)
    ]
    assert adapters[0].keys() == adapters[1].keys()
    assert all(torch.allclose(adapters[0][k], adapters[1][k], rtol=1e-5, atol=1e-7) for k in adapters[0])


def test_the_optimizer_of_a_full_fine_tune_is_kept_too(fresh_server: LocalServer) -> None:
    srv = fresh_server
    with srv.client() as client:
        model = client.models.create(project="resume", name="full", base_model=BASE)
    assert model.full_finetuning
    assert sft(srv, model) == 1
    srv.restart()
    assert sft(srv, model) == 2
    state = optimizer(srv, model, 2)
    assert {float(s["step"]) for s in state["optimizer"]["state"].values()} == {4.0}
    assert "model.embed_tokens.weight" in state["names"]
    with srv.client() as client:  # a job that changes nothing carries the state over to its step
        flat = {"trajectories": [{"reward": 0.5}, {"reward": 0.5}]}  # no reward variance: no step
        empty = client.training_jobs.create(model_id=model.id, trajectory_groups=[flat])
        assert empty.wait(progress=False).step == 3
    assert files(srv, model) == ["step1", "step2", "step3", "step3.optimizer.pt"]
    assert optimizer(srv, model, 3)["optimizer"]["state"].keys() == state["optimizer"]["state"].keys()
