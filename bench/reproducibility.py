"""What is bit for bit: the same seeded rollouts and jobs in fresh servers, at several torch thread counts.

    .venv/bin/python bench/reproducibility.py [--threads 1 2 4] [--isa avx2] [--sft-batches 8]
        [--batch-size 64] [--device cuda] [--smoke]

For each thread count T, starts ``toolkit serve`` in a fresh temporary folder with
``TOOLKIT_TORCH_THREADS=T`` (one server at a time), and for each ``--isa`` one more on the first
thread count with the CPU's vector instructions capped there (``ATEN_CPU_CAPABILITY``,
``MKL_ENABLE_INSTRUCTIONS``, ``ONEDNN_MAX_CPU_ISA``: what an older CPU would run), and there:
- gathers 8 words x 4 samples of word reversal from the built-in model at T=1 with ``seed=1``,
  one request at a time, then 32 at once;
- trains two models by the same jobs, each with ``experimental_config.seed`` 7: an SFT job of
  ``--sft-batches`` batches of ``--batch-size`` reversal examples on the built-in model (every
  weight), the same on a LoRA adapter (rank 8), and one RL step (PPO, 2 passes over 320-token
  minibatches) on a fresh model, over the groups the first server gathered (so every server trains
  on the same groups).
It prints the sha256 (first 12 hex) of each checkpoint's weight files, whether the two models of one
server agree, whether every other server agrees with the first, the largest absolute difference of
any weight from the first server's ("-" on the first server: nothing to compare it with), and the
seconds each job took. The gather runs one request at a
time (its tokens compared with the first server's) and 32 at once (its tokens compared with the
one-at-a-time gather of the same server, and the largest difference of their logprobs).
``--device cuda`` (or ``cuda:N``): instead of thread counts, four servers on that device, two as
shipped and two sampling on the CPU (``TOOLKIT_DEVICE_SAMPLING=0``); each is compared with the first
of its kind.
``--smoke``: threads 1 and 2, one SFT batch, no ``--isa`` (tests/bench/test_bench_reproducibility.py).
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
from safetensors.torch import load_file
from server_process import start_server

import toolkit as tk
from toolkit.rollouts import gather
from toolkit.tasks import reverse
from toolkit.types.training import TrajectoryGroup

BASE = "toolkit/tiny-chat-1m"
SEED = 7
RL_CONFIG = {"ppo": True, "learning_rate": 1e-4, "packed_sequence_length": 320, "num_iterations": 2}
JOBS = ("SFT, every weight", "SFT, LoRA r=8", "RL, every weight")


@dataclass(frozen=True)
class Sft:
    batches: int
    batch_size: int


@dataclass(frozen=True)
class Server:
    name: str
    env: dict[str, str]
    args: tuple[str, ...] = ()  # more ``toolkit serve`` options
    reference: str = ""  # the server this one is compared with: the first one if empty


@dataclass
class Run:
    """What one server (one thread count) gave: per job, the weight files of each of its two models."""

    name: str
    reference: str = ""  # the run it is compared with: the first one if empty
    tokens: list[list[int]] = field(default_factory=list)  # token ids of the seeded gather
    batched_tokens: list[list[int]] = field(default_factory=list)  # the same, 32 requests at once
    logprob_difference: float = 0.0  # the largest of their logprobs' differences
    weights: dict[str, list[dict[str, torch.Tensor]]] = field(default_factory=dict)
    digests: dict[str, list[str]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


def sampled(client: tk.Client, concurrency: int) -> list[TrajectoryGroup]:
    """8 words x 4 samples at T=1, seeded, ``concurrency`` requests at a time."""
    words = reverse.sample_words(8, seed=2)
    rollout = reverse.rollout(client, BASE)
    return gather(words, rollout, group_size=4, max_concurrency=concurrency, progress=False, seed=1)


def tokens_and_logprobs(groups: list[TrajectoryGroup]) -> tuple[list[list[int]], list[list[float]]]:
    choices = [t.choices()[0] for g in groups for t in g.trajectories]
    tokens = [list(c.token_ids or []) for c in choices]
    return tokens, [[t.logprob for t in c.logprobs.content] if c.logprobs else [] for c in choices]


def largest_difference(a: list[list[float]], b: list[list[float]]) -> float:
    """The largest difference of two samples' logprobs, token by token (as far as both go)."""
    pairs = (pair for x, y in zip(a, b, strict=True) for pair in zip(x, y, strict=False))
    return max((abs(p - q) for p, q in pairs), default=0.0)


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
    client: tk.Client, folder: Path, job: str, groups: list[TrajectoryGroup], sft: Sft
) -> tuple[str, dict[str, torch.Tensor]]:
    settings: dict[str, Any] = {"lora_config": {"rank": 8, "alpha": 16}} if "LoRA" in job else {}
    model = client.models.create(
        project="repro", name=f"m-{uuid.uuid4().hex[:8]}", base_model=BASE, **settings
    )
    if job.startswith("SFT"):
        words = reverse.sample_words(sft.batch_size * sft.batches, seed=3)
        handle = client.sft_training_jobs.create_from_data(
            model_id=model.id,
            data=[reverse.conversation(w) for w in words],
            config={"batch_size": sft.batch_size, "learning_rate": 1e-3},
            experimental_config={"seed": SEED},
        )
    else:
        handle = client.training_jobs.create(
            model_id=model.id, trajectory_groups=groups, experimental_config={**RL_CONFIG, "seed": SEED}
        )
    step = handle.wait(progress=False).step
    return checkpoint(client, model.id, step, folder)


def run_server(
    server: Server, groups: list[TrajectoryGroup] | None, sft: Sft
) -> tuple[Run, list[TrajectoryGroup]]:
    run = Run(server.name, server.reference)
    with tempfile.TemporaryDirectory(prefix="repro-") as tmp:
        folder = Path(tmp) / "data"
        folder.mkdir()
        proc, url, key = start_server(folder, server.env, server.args, folder / "server.log", timeout=600)
        try:
            with tk.Client(url, key) as client:
                gathered = sampled(client, 1)
                run.tokens, logprobs = tokens_and_logprobs(gathered)
                run.batched_tokens, batched_logprobs = tokens_and_logprobs(sampled(client, 32))
                run.logprob_difference = largest_difference(logprobs, batched_logprobs)
                groups = groups or scored(gathered)
                for job in JOBS:
                    for _ in range(2):
                        started = time.perf_counter()
                        digest, tensors = train(client, Path(tmp), job, groups, sft)
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
    by_name = {run.name: run for run in runs}
    yes: Callable[[bool], str] = lambda ok: "yes" if ok else "**no**"  # noqa: E731
    lines = [
        "| server | job | digest | two models equal | equal to | max abs weight difference | s per job |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        first = by_name.get(run.reference, runs[0])
        alone = first is run  # the first run: nothing to compare it with
        same = "-" if alone else f"{yes(run.tokens == first.tokens)} ({first.name})"
        lines.append(f"| {run.name} | seeded gather, 1 at a time | - | - | {same} | - | - |")
        same = yes(run.batched_tokens == run.tokens)
        difference = f"{run.logprob_difference:.3g} (logprobs)"
        lines.append(
            f"| {run.name} | seeded gather, 32 at once | - | - | {same} (tokens) | {difference} | - |"
        )
        for job in JOBS:
            digests = run.digests[job]
            weights = "-" if alone else f"{max_difference(run.weights[job][0], first.weights[job][0]):.3g}"
            same = "-" if alone else f"{yes(digests[0] == first.digests[job][0])} ({first.name})"
            lines.append(
                f"| {run.name} | {job} | `{digests[0][:12]}` | {yes(digests[0] == digests[1])} |"
                f" {same} | {weights} | {run.seconds[job]:.1f} |"
            )
    lines.append("")
    backend = [line for line in torch.__config__.parallel_info().splitlines() if "backend" in line]
    capability = torch.backends.cpu.get_cpu_capability()
    lines.append(f"torch {torch.__version__}; {'; '.join(backend)}; CPU capability {capability}")
    if torch.cuda.is_available():
        lines.append(f"GPU: {torch.cuda.get_device_name()}, CUDA {torch.version.cuda}")
    return "\n".join(lines)


def on_device(device: str) -> list[Server]:
    """Two servers on ``device`` as shipped (sampling and its random numbers there), two sampling on
    the CPU (``TOOLKIT_DEVICE_SAMPLING=0``)."""
    shipped, cpu = f"{device}, as shipped, run 1", f"{device}, CPU sampling, run 1"
    on_cpu = {"TOOLKIT_DEVICE_SAMPLING": "0"}
    return [
        Server(shipped, {}, ("--device", device)),
        Server(f"{device}, as shipped, run 2", {}, ("--device", device), shipped),
        Server(cpu, on_cpu, ("--device", device), shipped),
        Server(f"{device}, CPU sampling, run 2", on_cpu, ("--device", device), cpu),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--isa", action="append", default=[], help="e.g. avx2 (ATEN_CPU_CAPABILITY values)")
    parser.add_argument("--sft-batches", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default="cpu", help="cpu (thread counts), or cuda / cuda:N")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    sft = Sft(1 if args.smoke else args.sft_batches, args.batch_size)
    threads = [1, 2] if args.smoke else args.threads
    servers = (
        [Server(f"threads={t}", {"TOOLKIT_TORCH_THREADS": str(t)}) for t in threads]
        if args.device == "cpu"
        else on_device(args.device)
    )
    for isa in [] if args.smoke or args.device != "cpu" else args.isa:
        capped = {
            "ATEN_CPU_CAPABILITY": isa,
            "MKL_ENABLE_INSTRUCTIONS": isa.upper(),
            "ONEDNN_MAX_CPU_ISA": isa.upper(),
        }
        servers.append(Server(f"threads={threads[0]}, {isa}", {**servers[0].env, **capped}))
    runs, groups = [], None
    for server in servers:
        run, groups = run_server(server, groups, sft)
        runs.append(run)
    print(report(runs))


if __name__ == "__main__":
    main()
