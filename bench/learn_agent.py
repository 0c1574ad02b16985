"""An agent that learns: SFT warm start then RL on code lookup (toolkit.tasks.lookup), through the public
API only; prints held-out success and writes the curve to docs/performance.md ("Agent learning task").

    python bench/learn_agent.py                 # starts its own server in a temp folder
    python bench/learn_agent.py --url URL --key KEY --rl-steps 40 --no-write
    python bench/learn_agent.py --smoke         # every step of the run at the smallest size, no write

Per run: upload generated demonstrations (the call, the tool's result, the answer) and run SFT jobs
until held-out success at T=1 reaches --start-success (0.75), then RL steps: 16 scenarios x 8
multi-turn episodes rolled out through `/v1/chat/completions` with `tools` (toolkit.rollouts.Agent),
one RL job on the groups (every assistant turn trained on its sampled tokens), the next checkpoint
rolled out next.
Held-out success is measured on keys SFT and RL never saw.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

from learning_runs import learning_client, write_section

import toolkit as tk
from toolkit.tasks import lookup
from toolkit.tasks.agent_task import AgentTask
from toolkit.types.training import TrajectoryGroup

SECTION = "## Agent learning task"
BASE_MODEL = "toolkit/tiny-chat-1m"


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def rewards(groups: list[TrajectoryGroup]) -> list[float]:
    return [t.reward for g in groups for t in g.trajectories]


@dataclass
class Result:
    sft_batches: int = 0
    sft_seconds: float = 0.0
    rl_seconds: float = 0.0
    rollout_seconds: float = 0.0
    sft_curve: list[tuple[int, float, float]] = field(default_factory=list)  # batches, T=1, greedy
    curve: list[float] = field(default_factory=list)  # sampled reward per RL step
    called: list[float] = field(default_factory=list)  # episodes that got the tools' results, per RL step
    trainable: list[int] = field(
        default_factory=list
    )  # groups trained on per RL step (rewards not all equal)
    eval_curve: list[tuple[int, float, float]] = field(default_factory=list)  # RL step, T=1, greedy
    wall_seconds: float = 0.0
    target_minutes: float | None = None  # wall time at the first evaluation at or above --target (T=1)
    config: dict[str, object] = field(default_factory=dict)


def run(client: tk.Client, args: argparse.Namespace, task: AgentTask[Any] = lookup.TASK) -> Result:
    """The recipe on ``task``: SFT jobs until held-out success at T=1 reaches ``args.start_success`` (or
    ``args.sft_max_batches``), then ``args.rl_steps`` RL steps, evaluated every ``args.eval_every``."""
    started = time.perf_counter()
    result = Result()
    model = client.models.create(
        project="bench", name=f"{task.name}-{int(time.time())}", base_model=BASE_MODEL
    )

    def name(step: int) -> str:
        return f"wandb-artifact:///{model.entity}/{model.project}/{model.name}:step{step}"

    def evaluate(step: int) -> tuple[float, float]:
        sampled = task.success(client, name(step), args.eval_samples, seed=10_000)
        greedy = task.success(client, name(step), args.eval_samples, seed=10_000, temperature=0.0)
        if result.target_minutes is None and sampled >= args.target:
            result.target_minutes = (time.perf_counter() - started) / 60
        return sampled, greedy

    def sft(batches: int, rates: list[float], seed: int) -> int:
        job = client.sft_training_jobs.create_from_data(
            model_id=model.id,
            data=task.demonstrations(args.sft_batch_size * batches, seed=seed),
            config={"batch_size": args.sft_batch_size, "learning_rate": rates},
        )
        return job.wait(progress=False).step

    # SFT in jobs of --sft-chunk batches until held-out success at T=1 reaches --start-success
    step = 0
    while result.sft_batches < args.sft_max_batches:
        n = args.sft_chunk
        first = result.sft_batches
        rates = [args.sft_lr * min(1.0, (first + i + 1) / 20) for i in range(n)]
        sft_started = time.perf_counter()
        step = sft(n, rates, seed=first)
        result.sft_seconds += time.perf_counter() - sft_started
        result.sft_batches += n
        sampled, greedy = evaluate(step)
        result.sft_curve.append((result.sft_batches, sampled, greedy))
        print(
            f"SFT {result.sft_batches} batches: held-out success {sampled:.3f} (greedy {greedy:.3f})",
            flush=True,
        )
        if sampled >= args.start_success:
            break
    result.eval_curve.append((0, *result.sft_curve[-1][1:]))
    config: dict[str, object] = {
        "ppo": True,
        "learning_rate": args.lr,
        "packed_sequence_length": args.pack,
        "num_iterations": args.iterations,
    }
    if args.kl:  # to the SFT checkpoint
        config.update(kl_penalty_coef=args.kl, kl_penalty_reference_step=step)
    result.config = dict(config)
    eval_seconds = 0.0
    rl_started = time.perf_counter()
    for i in range(args.rl_steps):
        rollout_started = time.perf_counter()
        agent = task.agent(client, name(step))
        scenarios = task.scenarios(args.prompts, seed=i)
        groups = agent.gather(scenarios, group_size=args.group_size, max_concurrency=64, progress=False)
        result.curve.append(mean(rewards(groups)))
        made = [t for g in groups for t in g.trajectories]
        result.called.append(mean([float(bool(t.metrics.get("called"))) for t in made]))
        result.rollout_seconds += time.perf_counter() - rollout_started
        config["learning_rate"] = args.lr * min(1.0, (i + 1) / args.rl_warmup)
        job = client.training_jobs.create(
            model_id=model.id, trajectory_groups=groups, experimental_config=config
        )
        checkpoint = job.wait(progress=False, poll_interval=0.05)
        step = checkpoint.step
        result.trainable.append(int(checkpoint.metrics.get("data/step_num_groups_trainable", 0)))
        print(f"RL step {i + 1:3d}: sampled reward {result.curve[-1]:.3f}", flush=True)
        if (i + 1) % args.eval_every == 0 or i + 1 == args.rl_steps:
            eval_started = time.perf_counter()
            result.eval_curve.append((i + 1, *evaluate(step)))
            eval_seconds += time.perf_counter() - eval_started
            print(f"held-out success after {i + 1} RL steps: {result.eval_curve[-1][1]:.3f}", flush=True)
    result.rl_seconds = time.perf_counter() - rl_started - eval_seconds
    result.wall_seconds = time.perf_counter() - started
    return result


def report(result: Result, args: argparse.Namespace) -> str:
    steps = len(result.curve)
    load = " / ".join(f"{v:.1f}" for v in os.getloadavg())
    blocks = " ".join(f"{mean(result.curve[i : i + 10]):.2f}" for i in range(0, steps, 10))
    sft_rows = "\n".join(f"| {b} | {s:.3f} | {g:.3f} |" for b, s, g in result.sft_curve)
    rl_rows = "\n".join(f"| {s} | {t:.3f} | {g:.3f} |" for s, t, g in result.eval_curve)
    start, end = result.eval_curve[0][1], result.eval_curve[-1][1]
    reached = "never" if result.target_minutes is None else f"{result.target_minutes:.1f} min"
    return f"""{SECTION}

Produced by `python bench/learn_agent.py` (2 CPU cores shared with the other work of the machine at the
time, load {load} at the end; the built-in 1M-parameter model), through the HTTP API and the client only
(`--smoke` runs each step at the smallest size and writes nothing, tests/bench/test_bench_learning.py).
The task is code lookup (`toolkit.tasks.lookup`): the user asks `code kfz`, only the tool `get(key)`
knows the episode's code, so the model must call it and then answer with its result (two assistant
turns, both trained); success = the exact code and the end of the turn. Held-out success is measured on
{args.eval_samples} episodes of keys never trained on, at T=1 (sampled) and greedy.

- SFT warm start: {result.sft_batches} batches of {args.sft_batch_size} generated demonstrations at lr
  {args.sft_lr:g} (20 warm-up batches), in jobs of {args.sft_chunk} batches until the held-out
  success at T=1 reached {args.start_success}: {result.sft_seconds:.0f} s of jobs.
- RL: {steps} steps in {result.rl_seconds:.0f} s ({result.rl_seconds / max(1, steps):.1f} s per step, of which
  {result.rollout_seconds / max(1, steps):.1f} s multi-turn rollouts; held-out evaluations excluded): per
  step {args.prompts} scenarios x {args.group_size} episodes at T=1 through `/v1/chat/completions` with
  `tools`, one RL job (`{json.dumps(result.config)}`).
- Held-out success at T=1: **{start:.3f} after SFT -> {end:.3f} after RL**.
- Wall time of the whole run (evaluations included): {result.wall_seconds / 60:.1f} min; held-out
  success at T=1 first at or above {args.target} at {reached} (evaluations every {args.eval_every} RL steps).
- Sampled reward of the training episodes ({args.prompts * args.group_size} per step), means over blocks
  of 10 steps: {blocks}

| SFT batches | held-out success (T=1) | greedy |
|---|---|---|
{sft_rows}

| RL step | held-out success (T=1) | greedy |
|---|---|---|
{rl_rows}
"""


def add_recipe_arguments(parser: argparse.ArgumentParser) -> None:
    """The recipe's options (SFT warm start, RL, evaluation) and the server's."""
    parser.add_argument("--url")
    parser.add_argument("--key")
    parser.add_argument("--sft-batch-size", type=int, default=16)
    parser.add_argument("--sft-lr", type=float, default=1e-3)
    parser.add_argument("--sft-chunk", type=int, default=100, help="SFT batches per job")
    parser.add_argument("--sft-max-batches", type=int, default=800)
    parser.add_argument(
        "--start-success", type=float, default=0.75, help="SFT until this held-out success (T=1)"
    )
    parser.add_argument("--rl-steps", type=int, default=30)
    parser.add_argument("--prompts", type=int, default=16, help="scenarios per RL step")
    parser.add_argument("--group-size", type=int, default=8, help="episodes per scenario")
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--pack", type=int, default=3072, help="packed_sequence_length (3072: 4 minibatches)")
    parser.add_argument("--iterations", type=int, default=2, help="num_iterations (passes)")
    parser.add_argument("--rl-warmup", type=int, default=1, help="RL steps of linear lr warm-up")
    parser.add_argument(
        "--kl", type=float, default=0.0, help="kl_penalty_coef to the SFT checkpoint (0: none)"
    )
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--eval-samples", type=int, default=128)
    parser.add_argument("--target", type=float, default=0.8, help="report when held-out T=1 first reaches it")
    parser.add_argument(
        "--smoke", action="store_true", help="1 SFT job of 2 batches, 1 RL step, no write (CI)"
    )


def smallest(args: argparse.Namespace) -> None:
    """``--smoke``: every step at the smallest size (the start success is out of reach, so SFT runs to
    its cap)."""
    args.sft_batch_size, args.sft_chunk, args.sft_max_batches, args.start_success = 8, 2, 2, 2.0
    args.rl_steps, args.prompts, args.group_size, args.eval_every, args.eval_samples = 1, 2, 2, 1, 4


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_recipe_arguments(parser)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        smallest(args)
        args.no_write = True
    with learning_client(args.url, args.key, prefix="learn-agent-") as client:
        result = run(client, args)
    text = report(result, args)
    print(text)
    if not args.no_write:
        write_section(SECTION, text)


if __name__ == "__main__":
    main()
