"""SFT then RL on word reversal, through the HTTP API and the client only; prints the mean reward per
RL step and writes the curve to docs/performance.md ("Learning task").

    python bench/learn_reverse.py                 # starts its own server in a temp folder
    python bench/learn_reverse.py --url URL --key KEY --steps 100 --no-write
    python bench/learn_reverse.py --smoke         # every step of the run at the smallest size, no write

The recipe is the one measured with a plain PyTorch loop (docs/references.md): SFT at lr 1e-3
(20 warm-up batches, batch 64) to a checkpoint whose sampled (T=1) reward is still low (about 0.2,
where the bare loop started), then PPO (clip 0.2) at lr 1e-4, warmed up linearly over the first 10 RL
steps (each job's ``learning_rate``, as the bare loop's scheduler steps once per RL step), on 8 words x
8 samples per step, its minibatches (4 at the default packing) passed over twice (`num_iterations`):
8 gradient steps per RL step, as the bare loop takes. The base is `toolkit/tiny-random-1m`, the
random-init built-in model the recipe was measured on.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass
from typing import Any

from learning_runs import learning_client, write_section

import toolkit as tk
from toolkit.rollouts import gather
from toolkit.tasks import reverse
from toolkit.types.training import TrajectoryGroup

SECTION = "## Learning task"


def mean_reward(groups: list[TrajectoryGroup]) -> float:
    rewards = [t.reward for g in groups for t in g.trajectories]
    return sum(rewards) / len(rewards) if rewards else 0.0


@dataclass
class Result:
    sft_batches: int
    sft_seconds: float
    rl_seconds: float
    rollout_seconds: float
    curve: list[float]
    eval_curve: list[tuple[int, float]]
    config: dict[str, Any]


def run(client: tk.Client, args: argparse.Namespace) -> Result:
    model = client.models.create(project="bench", name=f"reverse-{int(time.time())}", base_model=args.base)
    name = f"wandb-artifact:///{model.entity}/{model.project}/{model.name}"

    def evaluate(step: int) -> float:
        words = reverse.sample_words(args.eval_samples, seed=10_000 + step, split="eval")
        rollout = reverse.rollout(client, f"{name}:step{step}")
        return mean_reward(gather(words, rollout, max_concurrency=64, max_exceptions=0, progress=False))

    def sft(batches: int, rates: list[float], seed: int) -> int:
        examples = [reverse.conversation(w) for w in reverse.sample_words(64 * batches, seed=seed)]
        job = client.sft_training_jobs.create_from_data(
            model_id=model.id, data=examples, config={"batch_size": 64, "learning_rate": rates}
        )
        return job.wait(progress=False).step

    # SFT until the sampled reward leaves the floor (the skill appears abruptly, docs/references.md)
    batches = args.sft_batches
    started = time.perf_counter()
    step = sft(batches, [1e-3 * min(1.0, (i + 1) / 20) for i in range(batches)], seed=0)
    sft_seconds = time.perf_counter() - started
    start_reward = evaluate(step)
    while start_reward < args.start_reward and batches < args.sft_batches + args.sft_extra:
        started = time.perf_counter()
        step = sft(5, [1e-3] * 5, seed=batches)
        sft_seconds += time.perf_counter() - started
        batches += 5
        start_reward = evaluate(step)
    print(f"SFT: {batches} batches of 64 in {sft_seconds:.1f} s -> step {step}", flush=True)
    eval_curve = [(0, start_reward)]
    print(f"held-out sampled reward after SFT: {start_reward:.3f}", flush=True)
    config = {
        "ppo": True,
        "learning_rate": args.lr,
        "packed_sequence_length": args.pack,
        "num_iterations": args.iterations,
    }
    curve: list[float] = []
    eval_seconds = rollout_seconds = 0.0
    started = time.perf_counter()
    for i in range(args.steps):
        step_started = time.perf_counter()
        words = reverse.sample_words(args.prompts, seed=i)
        groups = gather(
            words,
            reverse.rollout(client, f"{name}:step{step}"),
            group_size=args.group_size,
            max_concurrency=64,
            max_exceptions=0,
            progress=False,
        )
        curve.append(mean_reward(groups))
        rollout_seconds += time.perf_counter() - step_started
        lr = args.lr * min(1.0, (i + 1) / args.warmup) if args.warmup else args.lr
        job = client.training_jobs.create(
            model_id=model.id, trajectory_groups=groups, experimental_config={**config, "learning_rate": lr}
        )
        step = job.wait(progress=False).step
        print(f"RL step {i + 1:3d}: sampled reward {curve[-1]:.3f}", flush=True)
        if (i + 1) % args.eval_every == 0:
            eval_started = time.perf_counter()
            eval_curve.append((i + 1, evaluate(step)))
            eval_seconds += time.perf_counter() - eval_started
            print(f"held-out sampled reward after {i + 1} steps: {eval_curve[-1][1]:.3f}", flush=True)
    rl_seconds = time.perf_counter() - started - eval_seconds
    return Result(batches, sft_seconds, rl_seconds, rollout_seconds, curve, eval_curve, config)


def block_means(values: list[float], size: int = 10) -> list[float]:
    return [sum(values[i : i + size]) / len(values[i : i + size]) for i in range(0, len(values), size)]


def report(result: Result, args: argparse.Namespace) -> str:
    curve, steps = result.curve, len(result.curve)
    per_step = result.rl_seconds / max(1, steps)
    rollouts = result.rollout_seconds / max(1, steps)
    load = " / ".join(f"{v:.1f}" for v in os.getloadavg())
    threads = os.environ.get("TOOLKIT_TORCH_THREADS", "2")
    env = f"TOOLKIT_TORCH_THREADS={threads} " if "TOOLKIT_TORCH_THREADS" in os.environ else ""
    blocks = " ".join(f"{v:.2f}" for v in block_means(curve))
    first, last = sum(curve[:10]) / len(curve[:10]), sum(curve[-10:]) / len(curve[-10:])
    rows = "\n".join(f"| {s} | {v:.3f} |" for s, v in result.eval_curve)
    return f"""{SECTION}

Produced by `{env}python bench/learn_reverse.py` (2 CPU cores shared with the other work of the
machine at the time, load {load}; torch on {threads} thread(s) in the server; the built-in
1M-parameter model `{args.base}`), through
the HTTP API and the client only: upload SFT data, SFT job, then per RL step {args.prompts} words x
{args.group_size} samples rolled out through `/v1/chat/completions` at T=1 (`toolkit.rollouts.gather`),
one RL job (`{json.dumps(result.config)}`, the learning rate warmed up linearly over the first
{args.warmup} steps), wait for the checkpoint, roll out the new checkpoint.
`--smoke` runs each step at the smallest size and writes nothing (tests/bench/test_bench_learning.py).

- SFT: {result.sft_batches} batches of 64 at lr 1e-3 (20 warm-up batches); after the first job, jobs of 5
  batches until the held-out reward reached {args.start_reward}. {result.sft_seconds:.1f} s of jobs
  (the plain PyTorch loop of [references.md](references.md#learning-rates-for-the-built-in-model):
  130 batches in about 16 s).
- RL: {steps} steps in {result.rl_seconds:.0f} s, {per_step:.2f} s per step ({rollouts:.2f} s of rollouts, the
  rest the job: packing, gradient steps, checkpoint; held-out evaluations excluded). The job against
  the bare loop, measured in one run: [Training through the API](#training-through-the-api).
- Sampled reward of the training rollouts ({args.prompts * args.group_size} per step), means over blocks
  of 10 steps: {blocks}
- First 10 steps {first:.3f} -> last 10 steps {last:.3f}.

Sampled (T=1) reward on {args.eval_samples} held-out words:

| RL step | reward |
|---|---|
{rows}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url")
    parser.add_argument("--key")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--sft-batches", type=int, default=115, help="first SFT job; then 5 more at a time")
    parser.add_argument("--sft-extra", type=int, default=60, help="at most this many SFT batches more")
    parser.add_argument("--start-reward", type=float, default=0.2, help="SFT until this held-out reward")
    parser.add_argument("--prompts", type=int, default=8, help="words per RL step")
    parser.add_argument("--group-size", type=int, default=8, help="samples per word")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--pack", type=int, default=640, help="packed_sequence_length (640: 4 minibatches)")
    parser.add_argument("--iterations", type=int, default=2, help="num_iterations (passes)")
    parser.add_argument("--warmup", type=int, default=10, help="RL steps of linear learning-rate warm-up")
    parser.add_argument("--base", default="toolkit/tiny-random-1m", help="the base model")
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument("--eval-samples", type=int, default=128)
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="1+5 SFT batches, 1 RL step, no write (CI)")
    args = parser.parse_args()
    if args.smoke:  # the start reward is out of reach, so one more SFT job runs too
        args.sft_batches, args.sft_extra, args.start_reward, args.no_write = 1, 5, 2.0, True
        args.steps, args.prompts, args.group_size, args.eval_every, args.eval_samples = 1, 2, 2, 1, 8
    with learning_client(args.url, args.key, prefix="learn-reverse-") as client:
        result = run(client, args)
    text = report(result, args)
    print(text)
    if not args.no_write:
        write_section(SECTION, text)


if __name__ == "__main__":
    main()
