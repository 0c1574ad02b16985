"""``tk.replay`` across fresh servers. An experiment recorded on a server training with 4 torch threads
(a LoRA model's SFT then RL job, and an RL job of every weight whose checkpoint the thread count
changes) replays bit for bit on a fresh server, which trains with the recorded 4 threads though the
environment says 1. Replayed on a server of 1 thread, that RL job diverges and the report says the
thread count differs; a record of another device replays on it unless told otherwise, and a server
capped at another CPU capability diverges with that capability named."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import toolkit as tk
from conftest import LocalServer
from support.training_helpers import BASE, rewarded_group, served
from toolkit.rollouts import gather
from toolkit.tasks import reverse
from toolkit.types.experiments import ExperimentRecord
from toolkit.types.training import TrajectoryGroup

THREADS = 4  # RL of every weight below differs at 4 threads from 1 (docs/training.md, "Thread counts")
# the RL job of bench/reproducibility.py: 32 trajectories, PPO, 2 passes over 320-token minibatches
RL_CONFIG = {
    "ppo": True,
    "learning_rate": 1e-4,
    "packed_sequence_length": 320,
    "num_iterations": 2,
    "seed": 7,
}
LORA = {"rank": 4, "alpha": 8}
WORDS = ("cat", "dog", "sun", "map", "pen", "cup", "hat", "box")
CAPPED = {"AVX512": "avx2", "AVX2": "default"}  # a capability below this machine's


def started(folder: Path, **env: str) -> LocalServer:
    folder.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)
        return LocalServer(folder).start()


def scored(groups: list[TrajectoryGroup]) -> list[TrajectoryGroup]:
    """Rewards 0, 1, 2, ... within each group, so that every group trains."""
    return [
        TrajectoryGroup(
            trajectories=[t.model_copy(update={"reward": float(i)}) for i, t in enumerate(g.trajectories)]
        )
        for g in groups
    ]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("servers")
    server = started(root / "recorded", TOOLKIT_TORCH_THREADS=str(THREADS))
    path = root / "run.json"
    try:
        with server.client() as client, tk.experiment("threads", seed=8) as exp:
            lora = client.models.create(project="servers", name="lora", base_model=BASE, lora_config=LORA)
            sft = client.sft_training_jobs.create_from_data(
                model_id=lora.id,
                data=[reverse.conversation(w) for w in WORDS],
                config={"batch_size": 4, "learning_rate": 1e-3},
                experimental_config={"seed": 8},
            )
            sft.wait(progress=False)
            lora_rl = client.training_jobs.create(
                model_id=lora.id,
                trajectory_groups=[rewarded_group(client, served(lora, 1))],
                experimental_config={"learning_rate": 1e-3, "seed": 8},
            )
            lora_rl.wait(progress=False)
            full = client.models.create(project="servers", name="full", base_model=BASE)
            words = reverse.sample_words(8, seed=2)
            groups = gather(words, reverse.rollout(client, BASE), group_size=4, progress=False, seed=1)
            rl = client.training_jobs.create(
                model_id=full.id, trajectory_groups=scored(groups), experimental_config=RL_CONFIG
            )
            rl.wait(progress=False)
            exp.export(path)
    finally:
        server.stop()
    yield {"path": path, "root": root, "jobs": [sft.id, lora_rl.id, rl.id]}


def the_rl_job_of_every_weight(recorded: dict[str, Any]) -> ExperimentRecord:
    record = tk.load_experiment(recorded["path"])
    record.jobs = [job for job in record.jobs if job.job_id == recorded["jobs"][2]]
    return record


def test_lora_and_full_jobs_replay_bit_for_bit_at_the_recorded_thread_count(
    recorded: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLKIT_TORCH_THREADS", "1")  # what the fresh server would take without the record
    record = tk.load_experiment(recorded["path"])
    assert {r.torch_threads for m in record.models for r in m.records if r.job_id} == {THREADS}
    assert record.models[0].request["lora_config"] == LORA
    report = tk.replay(record)
    assert report.ok, report
    assert [(r.job_id, r.kind, r.match) for r in report.rows] == [
        (job, kind, True) for job, kind in zip(recorded["jobs"], ("sft", "rl", "rl"), strict=True)
    ]
    digests = [r.recorded_digest for r in report.rows]
    assert digests == [r.replayed_digest for r in report.rows] and len(set(digests)) == 3 and all(digests)
    fresh = f"replayed on a fresh local server on cpu, as recorded, training with {THREADS} torch threads"
    assert f"{fresh}, as recorded" in report.notes


def test_at_another_thread_count_the_job_diverges_and_the_report_says_why(
    recorded: dict[str, Any],
) -> None:
    server = started(recorded["root"] / "one-thread", TOOLKIT_TORCH_THREADS="1")
    try:
        with server.client() as client:
            report = tk.replay(the_rl_job_of_every_weight(recorded), client)
    finally:
        server.stop()
    (row,) = report.rows
    assert not row.match and row.what is not None
    assert row.what.startswith("checkpoint_digest: recorded ")
    differs = f"recorded with {THREADS} torch threads, replayed with 1 torch threads"
    assert row.what.endswith(f"({differs})")
    assert f"the replay's environment differs: {differs}" in report.notes


@pytest.mark.skipif(torch.cuda.is_available(), reason="a record of cuda:0 would replay on this machine's GPU")
def test_a_record_of_another_device_replays_there_unless_told(recorded: dict[str, Any]) -> None:
    record = the_rl_job_of_every_weight(recorded)
    for entry in record.models:
        for r in entry.records:
            r.device = "cuda:0"
    with pytest.raises(RuntimeError, match="device 'cuda' asked for, but torch sees no CUDA device"):
        tk.replay(record)
    report = tk.replay(record, device="cpu")
    assert report.ok, report  # the job was trained on this CPU: only the record says otherwise
    assert (
        f"replayed on a fresh local server on cpu (asked for; recorded on cuda:0), training with {THREADS}"
        " torch threads, as recorded"
    ) in report.notes
    assert "the replay's environment differs: recorded on cuda:0, replayed on cpu" in report.notes


def test_another_cpu_capability_diverges_and_is_named(
    recorded: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    here = torch.backends.cpu.get_cpu_capability()
    if here not in CAPPED:
        pytest.skip(f"no capability below {here} to cap at")
    capped = CAPPED[here]
    for name in ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA"):
        monkeypatch.setenv(name, capped if name.startswith("ATEN") else capped.upper())
    report = tk.replay(the_rl_job_of_every_weight(recorded))
    (row,) = report.rows
    assert not row.match and row.what is not None
    assert row.what.startswith("checkpoint_digest: recorded ")
    assert row.what.endswith(f"(recorded on {here}, replayed on {capped.upper()})")
