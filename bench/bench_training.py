"""Training through the API against the bare PyTorch loop, in one run on the same model and data.

    .venv/bin/python bench/bench_training.py [--threads 2] [--repeats 5] [--write] [--smoke]

Starts ``toolkit serve`` in a temporary folder (torch on ``--threads`` threads, as this process) and
trains the random-init built-in model ``toolkit/tiny-random-1m`` both ways:
- RL: 64 words x 8 samples of word reversal, rolled out once through ``/v1/chat/completions`` at T=1
  and given seeded random rewards (so every group trains). An RL step over the first n groups is one
  job (PPO, lr 1e-4, ``packed_sequence_length`` 640, ``num_iterations`` 2: at 8 groups 4 minibatches
  x 2 passes, the bare loop of docs/references.md), timed from its POST to the first token answered
  by the new checkpoint and split into phases by the job's timestamps and events; the bare loop takes
  the same gradient steps over the same minibatches (bench/training_bare.py). n = 1, 2, 4, ..., 64 is
  the scaling curve (docs/figures/training_scaling.svg).
- SFT: ``--sft-batches`` batches of 64 reversal examples at lr 1e-3 as one job, from its POST to the
  first token of its checkpoint, against the bare loop on the same rendered and masked examples.
Each figure is the median of ``--repeats`` interleaved runs (API, bare, API, bare, ...) after a warm-up
of each. ``--write`` puts the report into docs/performance.md ("Training through the API") and the
figure into docs/figures/; ``--figure PATH`` writes the figure there instead; ``--smoke``: 1 group, 1
SFT batch, 1 repeat, no write (tests/bench/test_bench_training.py).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from charts import scaling_chart
from learning_runs import ROOT, write_section
from server_process import start_server
from training_bare import BareRL, BareSFT

import toolkit as tk
from toolkit.client.jobs import TrainingJobHandle
from toolkit.client.sft_data import train_jsonl
from toolkit.rollouts import gather
from toolkit.server.engine.model import RANDOM_NAME, builtin_spec
from toolkit.server.training.config import resolve
from toolkit.tasks import reverse
from toolkit.types.training import ExperimentalTrainingConfig, TrajectoryGroup

SECTION = "## Training through the API"
FIGURE = ROOT / "docs" / "figures" / "training_scaling.svg"
RL_CONFIG = {"ppo": True, "learning_rate": 1e-4, "packed_sequence_length": 640, "num_iterations": 2}
RL_SETTINGS = resolve(ExperimentalTrainingConfig.model_validate(RL_CONFIG))  # what the server makes of it
GROUP_SIZE, TARGET_GROUPS, SFT_BATCH, SFT_LR = 8, 8, 64, 1e-3
PHASES = {
    "request": "POST, validation, storing, queue (POST to the job's start)",
    "prepare": "policy, tokenizing, packing (job start to `training_started`)",
    "gradient steps": "forward, backward, AdamW, an event per step",
    "checkpoint": "weights and optimizer state written, synced, committed",
    "noticed": "the client's `wait()` sees `training_ended`",
    "servable": "the engine loads the checkpoint and answers a first token",
}


@dataclass
class Timed:
    """One job through the API: seconds from its POST to a first token of its checkpoint."""

    total: float
    phases: dict[str, float]
    gradient_steps: int
    base_step: int


def seconds(at: datetime | None) -> float:
    assert at is not None
    return at.timestamp()


def api_job(client: tk.Client, model_id: str, create: Callable[[], TrainingJobHandle]) -> Timed:
    """Run the job ``create`` posts, then ask its checkpoint for one token; its phases from the job's
    record and events (server and client share the machine's clock)."""
    posted = time.time()
    job = create()
    checkpoint = job.wait(progress=False)
    noticed = time.time()
    message = [{"role": "user", "content": "reverse cat"}]
    client.chat.completions.create(model=f"{model_id}:step{checkpoint.step}", messages=message, max_tokens=1)
    served = time.time()
    record = job.refresh()
    events = list(job.events(follow=False))
    started = next(seconds(e.created_at) for e in events if e.type == "training_started")
    steps = [seconds(e.created_at) for e in events if e.type == "gradient_step"]
    finished = seconds(record.finished_at)
    last = steps[-1] if steps else started
    phases = {
        "request": seconds(record.started_at) - posted,
        "prepare": started - seconds(record.started_at),
        "gradient steps": last - started,
        "checkpoint": finished - last,
        "noticed": noticed - finished,
        "servable": served - noticed,
    }
    assert record.base_step is not None
    return Timed(served - posted, phases, len(steps), record.base_step)


def median_timed(runs: list[Timed]) -> Timed:
    return Timed(
        statistics.median(r.total for r in runs),
        {p: statistics.median(r.phases[p] for r in runs) for p in PHASES},
        runs[0].gradient_steps,
        runs[0].base_step,
    )


@dataclass
class Pair:
    api: Timed
    bare: float

    @property
    def ratio(self) -> float:
        return self.api.total / self.bare


def rollouts(client: tk.Client, model_id: str, groups: int) -> list[TrajectoryGroup]:
    """``groups`` words x 8 samples from the base at T=1."""
    words = reverse.sample_words(groups, seed=0)
    rollout = reverse.rollout(client, model_id)
    return gather(words, rollout, group_size=GROUP_SIZE, max_concurrency=64, max_exceptions=0, progress=False)


def rewarded(groups: list[TrajectoryGroup], seed: int) -> list[TrajectoryGroup]:
    """The groups with new random rewards: every group trains, and each job gets trajectories of its
    own, as in an RL loop (the server links a job's trajectories to logged copies by their content)."""
    rng = random.Random(seed)

    def scored(group: TrajectoryGroup) -> TrajectoryGroup:
        trajectories = [t.model_copy(update={"reward": rng.random()}) for t in group.trajectories]
        return group.model_copy(update={"trajectories": trajectories})

    return [scored(group) for group in groups]


def measure_rl(client: tk.Client, base: str, bare: BareRL, sizes: list[int], repeats: int) -> dict[int, Pair]:
    """An RL step of each size on a new model of ``base``, through the API and in ``bare``
    (:data:`RL_CONFIG`), interleaved; medians per size."""
    model = client.models.create(project="bench", name="rl", base_model=base)
    sampled = rollouts(client, model.id, max(sizes))
    jobs = 0

    def pair(n: int) -> tuple[Timed, float]:
        nonlocal jobs
        jobs += 1
        groups = rewarded(sampled[:n], seed=jobs)

        def create() -> TrainingJobHandle:
            return client.training_jobs.create(
                model_id=model.id, trajectory_groups=groups, experimental_config=RL_CONFIG
            )

        timed = api_job(client, model.id, create)
        batches = bare.batches(groups, seed=timed.base_step)  # the job's own minibatches
        assert len(batches) == timed.gradient_steps, (len(batches), timed.gradient_steps)
        return timed, bare.step(batches)

    pair(min(sizes))  # warm-up: the server loads the model to train, both sides allocate
    results: dict[int, Pair] = {}
    for n in sizes:
        runs = [pair(n) for _ in range(repeats)]
        results[n] = Pair(median_timed([t for t, _ in runs]), statistics.median(b for _, b in runs))
        print(f"RL {n:2d} groups: API {results[n].api.total:.3f} s, bare {results[n].bare:.3f} s", flush=True)
    return results


def measure_sft(client: tk.Client, base: str, bare: BareSFT, batches: int, repeats: int) -> Pair:
    """``batches`` batches as one job on a new model of ``base``, and ``bare`` over the same examples;
    medians."""
    model = client.models.create(project="bench", name="sft", base_model=base)
    examples = [reverse.conversation(w) for w in reverse.sample_words(SFT_BATCH * batches, seed=1)]
    artifact = client.artifacts.upload(
        project="bench", files={"train.jsonl": train_jsonl(examples)}, model_id=model.id
    )
    tensors = bare.batches(examples, SFT_BATCH)
    config = {"batch_size": SFT_BATCH, "learning_rate": SFT_LR}

    def create() -> TrainingJobHandle:
        return client.sft_training_jobs.create(
            model_id=model.id, training_data_url=artifact.url, config=config
        )

    def pair() -> tuple[Timed, float]:
        return api_job(client, model.id, create), bare.step(tensors, SFT_LR)

    pair()  # warm-up
    runs = [pair() for _ in range(repeats)]
    result = Pair(median_timed([t for t, _ in runs]), statistics.median(b for _, b in runs))
    print(f"SFT {batches} batches: API {result.api.total:.3f} s, bare {result.bare:.3f} s", flush=True)
    return result


# ----------------------------------------------------------------------------- report


def around(p: Pair) -> float:
    """What the API spends outside its gradient steps: its fixed cost per step."""
    return sum(v for phase, v in p.api.phases.items() if phase != "gradient steps")


def bend(rl: dict[int, Pair]) -> str:
    """Where the API's cost curve turns from its fixed cost to the gradient work: the fixed cost
    measured by the phases, against the bare loop's cost per group (a line fitted to its curve)."""
    sizes = sorted(rl)
    if len(sizes) < 3:
        return "Too few sizes to fit the curve."
    small, large = rl[sizes[0]], rl[sizes[-1]]
    per_group = statistics.linear_regression(sizes, [rl[n].bare for n in sizes]).slope
    if per_group <= 0:
        return "The bare loop's cost did not grow with the size: no bend to place."
    return (
        f"Outside its gradient steps the API spends {around(small):.3f} s per step at {sizes[0]} group(s) "
        f"and {around(large):.3f} s at {sizes[-1]} (request, prepare, checkpoint, notice, first token; "
        f"the request and the stored trajectories grow with the size); the bare loop's gradient work "
        f"costs {1000 * per_group:.0f} ms per group (a line fitted to its curve). So the API's curve bends "
        f"near {around(small) / per_group:.1f} groups per step, where that fixed cost equals the gradient "
        "work: below, the fixed cost dominates and the curve is nearly flat; above, it rises with the "
        f"gradient work, parallel to the bare loop's on the log-log plot ({large.ratio:.2f}x at "
        f"{sizes[-1]} groups)."
    )


def phase_rows(jobs: dict[str, Pair]) -> str:
    """One row per job: the API's total, its phases, the bare loop and the ratio."""
    return "\n".join(
        f"| {name} | {p.api.total:.3f} | "
        + " | ".join(f"{p.api.phases[phase]:.3f}" for phase in PHASES)
        + f" | {p.bare:.3f} | {p.ratio:.2f}x |"
        for name, p in jobs.items()
    )


def report(rl: dict[int, Pair], sft: Pair, args: argparse.Namespace, loads: list[str]) -> str:
    groups = TARGET_GROUPS if TARGET_GROUPS in rl else max(rl)
    target = rl[groups]
    command = " ".join(["bench/bench_training.py", *sys.argv[1:]])
    targets = "\n".join(
        [
            f"| RL step, {groups} groups x {GROUP_SIZE} ({target.api.gradient_steps} gradient steps) | "
            f"{target.api.total:.3f} | {target.bare:.3f} | {target.ratio:.2f}x | 1.5x |",
            f"| SFT, {args.sft_batches} batches of {SFT_BATCH} | {sft.api.total:.3f} | {sft.bare:.3f} | "
            f"{sft.ratio:.2f}x | 1.5x |",
        ]
    )
    jobs = {f"RL, {n} x {GROUP_SIZE} ({p.api.gradient_steps} steps)": p for n, p in sorted(rl.items())}
    jobs[f"SFT, {args.sft_batches} x {SFT_BATCH}"] = sft
    phases = "\n".join(f"- {name}: {what}" for name, what in PHASES.items())
    return f"""{SECTION}

Produced by `.venv/bin/python {command}` (2 CPU cores shared with the other work of the
machine, load {loads[0]} at the start and {loads[1]} at the end; torch on {args.threads} thread(s) in
the server's job worker and in the bare loop's thread; medians of {args.repeats} interleaved runs). The
random-init built-in model `{RANDOM_NAME}`; RL jobs `{json.dumps(RL_CONFIG)}` on word-reversal
rollouts (8 samples a word, seeded random rewards so that every group trains), SFT jobs of batches
of {SFT_BATCH} at lr {SFT_LR}. Through the API is the time from the job's POST to the first token its
checkpoint answers; the bare loop (`bench/training_bare.py`) is the gradient work alone, on the same
weights, the same minibatches and the server's own loss, in the bench's process. `--smoke` runs the
smallest sizes (`tests/bench/test_bench_training.py`).

| target (issue 16) | through the API, s | bare loop, s | ratio | goal |
|---|---|---|---|---|
{targets}

Every job, its phases through the API (medians, s; RL jobs by groups of 8 samples; the figure of the RL
rows: [figures/training_scaling.svg](figures/training_scaling.svg)):

| job | through the API | {" | ".join(PHASES)} | bare loop | ratio |
|---|---|---|---|---|---|---|---|---|---|
{phase_rows(jobs)}

{phases}

{bend(rl)}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2, help="torch threads, server and bare loop")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-groups", type=int, default=64, help="the scaling curve's largest size")
    parser.add_argument("--sft-batches", type=int, default=20)
    parser.add_argument("--write", action="store_true", help="docs/performance.md and docs/figures/")
    parser.add_argument("--figure", type=Path, help="write the figure here")
    parser.add_argument("--smoke", action="store_true", help="1 group, 1 SFT batch, 1 repeat, no write")
    args = parser.parse_args()
    if args.smoke:
        args.max_groups, args.sft_batches, args.repeats, args.write = 1, 1, 1, False
    sizes = [2**i for i in range(args.max_groups.bit_length()) if 2**i <= args.max_groups]
    threads = str(args.threads)
    loads = [" / ".join(f"{v:.1f}" for v in os.getloadavg())]
    with tempfile.TemporaryDirectory(prefix="bench-training-") as folder:
        env = {"TOOLKIT_TORCH_THREADS": threads, "OMP_NUM_THREADS": threads}
        proc, url, key = start_server(Path(folder), env)
        try:
            spec = builtin_spec(Path(folder), RANDOM_NAME)
            with tk.Client(url, key) as client:
                rl = measure_rl(
                    client, RANDOM_NAME, BareRL(spec, RL_SETTINGS, args.threads), sizes, args.repeats
                )
                bare_sft = BareSFT(spec, args.threads)
                sft = measure_sft(client, RANDOM_NAME, bare_sft, args.sft_batches, args.repeats)
        finally:
            proc.terminate()
            proc.wait(30)
    loads.append(" / ".join(f"{v:.1f}" for v in os.getloadavg()))
    text = report(rl, sft, args, loads)
    print(text)
    figure = args.figure or (FIGURE if args.write else None)
    if figure is not None:
        series = {
            "through the API": [(n, p.api.total) for n, p in rl.items()],
            "bare PyTorch loop": [(n, p.bare) for n, p in rl.items()],
        }
        title = "RL step cost, toolkit/tiny-random-1m"
        scaling_chart(figure, series, title=title, xlabel="groups of 8 per step", ylabel="seconds per step")
    if args.write:
        write_section(SECTION, text)


if __name__ == "__main__":
    main()
