"""What is bit for bit: the same seeded rollouts and jobs in fresh servers, at several torch thread counts.

    .venv/bin/python bench/reproducibility.py [--threads 1 2] [--sft-batches 8] [--smoke]

For each thread count T, starts ``toolkit serve`` in a fresh temporary folder with
``TOOLKIT_TORCH_THREADS=T`` (one server at a time) and there:
- gathers 8 words x 4 samples of word reversal from the built-in model at T=1 with ``seed=1``;
- trains two models by the same jobs, each with ``experimental_config.seed`` 7: an SFT job of
  ``--sft-batches`` batches of 16 reversal examples on the built-in model (every weight), the same on
  a LoRA adapter (rank 8), and one RL step (PPO, 2 passes of 4 minibatches) on a fresh model, over
  the groups the first server gathered (so every server trains on the same groups).
It prints the sha256 (first 12 hex) of each checkpoint's weight files, whether the two models of one
server agree, whether every server agrees with the first, the largest absolute difference of any
weight from the first server's, and the seconds each job took. ``--smoke``: threads 1 and 2, one SFT
batch (tests/bench/test_bench_reproducibility.py).
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from learning_runs import start_server
from safetensors.torch import load_file

import toolkit as tk
from toolkit.rollouts import gather
from toolkit.tasks import reverse
from toolkit.types.training import TrajectoryGroup

BASE = "toolkit/tiny-chat-1m"
SEED = 7
RL_CONFIG = {"ppo": True, "learning_rate": 1e-4, "packed_sequence_length": 160, "num_iterations": 2}
JOBS = ("SFT, every weight", "SFT, LoRA r=8", "RL, every weight")


@dataclass
class Run:
    """What one server (one thread count) gave: per job, the weight files of each of its two models."""

    threads: int
    tokens: list[list[int]] = field(default_factory=list)  # token ids of the seeded gather
    weights: dict[str, list[dict[str, torch.Tensor]]] = field(default_factory=dict)
    digests: dict[str, list[str]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


def scored(groups: list[TrajectoryGroup]) -> list[TrajectoryGroup]:
    """Rewards 0, 1, 2, ... within each group, so that every group trains."""
    return [
        TrajectoryGroup(
            trajectories=[t.model_copy(update={"reward": float(i)}) for i, t in enumerate(g.trajectories)]
        )
        for g in groups
    ]


def checkpoint(
    client: tk.Client, model_id: str, step: int, folder: Path
) -> tuple[str, dict[str, torch.Tensor]]:
    """The checkpoint's digest (sha256 over its weight files, names sorted) and its tensors."""
    path = client.models.checkpoints.download(model_id, step, folder / f"{model_id}-{step}")
    digest, tensors = hashlib.sha256(), {}
    for file in sorted(path.glob("*.safetensors")):
        digest.update(file.name.encode() + file.read_bytes())
        tensors |= load_file(file)
    return digest.hexdigest(), tensors


def train(
    client: tk.Client, folder: Path, job: str, groups: list[TrajectoryGroup], batches: int
) -> tuple[str, dict[str, torch.Tensor]]:
    settings: dict[str, Any] = {"lora_config": {"rank": 8, "alpha": 16}} if "LoRA" in job else {}
    model = client.models.create(
        project="repro", name=f"m-{uuid.uuid4().hex[:8]}", base_model=BASE, **settings
    )
    if job.startswith("SFT"):
        words = reverse.sample_words(16 * batches, seed=3)
        handle = client.sft_training_jobs.create_from_data(
            model_id=model.id,
            data=[reverse.conversation(w) for w in words],
            config={"batch_size": 16, "learning_rate": 1e-3},
            experimental_config={"seed": SEED},
        )
    else:
        handle = client.training_jobs.create(
            model_id=model.id, trajectory_groups=groups, experimental_config={**RL_CONFIG, "seed": SEED}
        )
    step = handle.wait(progress=False).step
    return checkpoint(client, model.id, step, folder)


def run_server(
    threads: int, groups: list[TrajectoryGroup] | None, batches: int
) -> tuple[Run, list[TrajectoryGroup]]:
    run = Run(threads)
    with tempfile.TemporaryDirectory(prefix="repro-") as tmp:
        proc, url, key = start_server(Path(tmp) / "data", {"TOOLKIT_TORCH_THREADS": str(threads)})
        try:
            with tk.Client(url, key) as client:
                gathered = gather(
                    reverse.sample_words(8, seed=2),
                    reverse.rollout(client, BASE),
                    group_size=4,
                    progress=False,
                    seed=1,
                )
                run.tokens = [list(t.choices()[0].token_ids or []) for g in gathered for t in g.trajectories]
                groups = groups or scored(gathered)
                for job in JOBS:
                    for _ in range(2):
                        started = time.perf_counter()
                        digest, tensors = train(client, Path(tmp), job, groups, batches)
                        run.seconds[job] = time.perf_counter() - started
                        run.digests.setdefault(job, []).append(digest)
                        run.weights.setdefault(job, []).append(tensors)
        finally:
            proc.terminate()
            proc.wait(30)
    return run, groups


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def report(runs: list[Run]) -> str:
    first = runs[0]
    yes: Callable[[bool], str] = lambda ok: "yes" if ok else "**no**"  # noqa: E731
    lines = [
        "| threads | job | digest | two models equal | equal to threads="
        f"{first.threads} | max abs weight difference | s per job |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        same = yes(run.tokens == first.tokens)
        lines.append(f"| {run.threads} | seeded gather, 32 samples | - | - | {same} | - | - |")
        for job in JOBS:
            digests = run.digests[job]
            difference = max_difference(run.weights[job][0], first.weights[job][0])
            lines.append(
                f"| {run.threads} | {job} | `{digests[0][:12]}` | {yes(digests[0] == digests[1])} |"
                f" {yes(digests[0] == first.digests[job][0])} | {difference:.3g} | {run.seconds[job]:.1f} |"
            )
    lines.append("")
    backend = [line for line in torch.__config__.parallel_info().splitlines() if "backend" in line]
    capability = torch.backends.cpu.get_cpu_capability()
    lines.append(f"torch {torch.__version__}; {'; '.join(backend)}; CPU capability {capability}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--sft-batches", type=int, default=8)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    batches = 1 if args.smoke else args.sft_batches
    threads = [1, 2] if args.smoke else args.threads
    runs, groups = [], None
    for count in threads:
        run, groups = run_server(count, groups, batches)
        runs.append(run)
    print(report(runs))


if __name__ == "__main__":
    main()
