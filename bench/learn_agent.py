"""An agent that learns: SFT warm start then RL on code lookup (toolkit.tasks.lookup), through the public
API only; prints held-out success and writes the curve to docs/performance.md ("Agent learning task").

    python bench/learn_agent.py                 # starts its own server in a temp folder
    python bench/learn_agent.py --url URL --key KEY --rl-steps 40 --no-write
    python bench/learn_agent.py --smoke         # every step of the run at the smallest size, no write
    python bench/learn_agent.py --base-model toolkit/smollm2-135m-instruct --time-limit 80   # SmolLM2, LoRA

Per run: upload generated demonstrations (the call, the tool's result, the answer) and run SFT jobs
until held-out success at T=1 reaches --start-success (0.75), then RL steps: 16 scenarios x 8
multi-turn episodes rolled out through `/v1/chat/completions` with `tools` (toolkit.rollouts.Agent),
one RL job on the groups (every assistant turn trained on its sampled tokens), the next checkpoint
rolled out next.
Held-out success is measured on keys SFT and RL never saw, for the base model too.

The options whose defaults differ between the built-in 1M model (fully fine-tuned) and SmolLM2-135M
(a rank-8 LoRA adapter) take them from :data:`RECIPES` by ``--base-model`` (SmolLM2's for any other
base). Every run reports the wall and CPU seconds of its phases, the load during each and the server's
peak RSS (where the server runs on this machine). A run on another base writes its own section,
"## SmolLM2: the agent loop and its memory", with the server's RSS sampled every 2 s through the whole
run (docs/figures/smollm2_loop_rss.svg), its peak and its slope from RL step to RL step.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from charts import line_chart
from learning_runs import ROOT, Watch, costs, learning_server, write_section

import toolkit as tk
from toolkit.tasks import lookup
from toolkit.tasks.agent_task import AgentTask
from toolkit.types.training import TrajectoryGroup

SECTION = "## Agent learning task"
SMOLLM2_SECTION = "## SmolLM2: the agent loop and its memory"
RSS_FIGURE = ROOT / "docs" / "figures" / "smollm2_loop_rss.svg"
RSS_LIMIT = 6 * 10**9  # issue 34: the whole loop on SmolLM2 under 6 GB of RSS on the CPU
TINY = "toolkit/tiny-chat-1m"
SMOLLM2 = "toolkit/smollm2-135m-instruct"
# The recipe's settings that differ per base model, each an option's default (an option given wins).
RECIPES: dict[str, dict[str, Any]] = {
    TINY: {
        "sft_lr": 1e-3,
        "sft_warmup": 20,
        "sft_chunk": 100,
        "sft_max_batches": 800,
        "lr": 2e-4,
        "pack": 3072,
        "iterations": 2,
        "eval_every": 10,
    },
    SMOLLM2: {
        "sft_lr": 1e-3,
        "sft_warmup": 5,
        "sft_chunk": 10,
        "sft_max_batches": 80,
        "lr": 1e-4,
        "pack": 3072,
        "iterations": 1,
        "eval_every": 5,
    },
}


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def rewards(groups: list[TrajectoryGroup]) -> list[float]:
    return [t.reward for g in groups for t in g.trajectories]


@dataclass
class Result:
    base: tuple[float, float] = (0.0, 0.0)  # the base model's held-out success: T=1, greedy
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
    eval_minutes: list[float] = field(default_factory=list)  # wall time at the end of each evaluation
    config: dict[str, object] = field(default_factory=dict)
    watch: Watch | None = None  # what each phase cost: sft, evaluations, rollouts, rl jobs
    rss_steps: list[tuple[float, int]] = field(default_factory=list)  # (seconds, server RSS) per RL step


def run(
    client: tk.Client,
    args: argparse.Namespace,
    task: AgentTask[Any] = lookup.TASK,
    pid: int | None = None,
) -> Result:
    """The recipe on ``task`` with ``args.base_model``: the base evaluated, SFT jobs until held-out
    success at T=1 reaches ``args.start_success`` (or ``args.sft_max_batches``), then ``args.rl_steps``
    RL steps, evaluated every ``args.eval_every``. ``pid``: the server's, to measure its CPU and RSS."""
    started = time.perf_counter()
    watch = Watch(pid)
    result = Result(watch=watch)
    model = client.models.create(
        project="bench", name=f"{task.name}-{int(time.time())}", base_model=args.base_model
    )

    def name(step: int) -> str:
        return f"wandb-artifact:///{model.entity}/{model.project}/{model.name}:step{step}"

    def evaluate(step: int) -> tuple[float, float]:
        with watch.phase("evaluations"):
            sampled = task.success(client, name(step), args.eval_samples, seed=10_000)
            greedy = task.success(client, name(step), args.eval_samples, seed=10_000, temperature=0.0)
        result.eval_minutes.append((time.perf_counter() - started) / 60)
        if result.target_minutes is None and sampled >= args.target:
            result.target_minutes = result.eval_minutes[-1]
        return sampled, greedy

    def sft(batches: int, rates: list[float], seed: int) -> int:
        with watch.phase("sft"):
            job = client.sft_training_jobs.create_from_data(
                model_id=model.id,
                data=task.demonstrations(args.sft_batch_size * batches, seed=seed),
                config={"batch_size": args.sft_batch_size, "learning_rate": rates},
            )
            return job.wait(progress=False).step

    result.base = evaluate(0)
    print(f"base model: held-out success {result.base[0]:.3f} (greedy {result.base[1]:.3f})", flush=True)
    # SFT in jobs of --sft-chunk batches until held-out success at T=1 reaches --start-success
    step = 0
    while result.sft_batches < args.sft_max_batches:
        n = min(args.sft_chunk, args.sft_max_batches - result.sft_batches)
        first = result.sft_batches
        rates = [args.sft_lr * min(1.0, (first + i + 1) / args.sft_warmup) for i in range(n)]
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
        # --time-limit: no step that would end (with its evaluation) past it, at the mean step so far
        per_step = (time.perf_counter() - rl_started) / i if i else 0.0
        per_eval = eval_seconds / max(1, len(result.eval_curve) - 1)
        if args.time_limit and time.perf_counter() - started + per_step + per_eval > args.time_limit * 60:
            print(f"--time-limit {args.time_limit:g} min: stopped after {i} RL steps", flush=True)
            if result.eval_curve[-1][0] != i:  # the last step done evaluated
                result.eval_curve.append((i, *evaluate(step)))
            break
        rollout_started = time.perf_counter()
        with watch.phase("rollouts"):
            agent = task.agent(client, name(step))
            scenarios = task.scenarios(args.prompts, seed=i)
            groups = agent.gather(scenarios, group_size=args.group_size, max_concurrency=64, progress=False)
        result.curve.append(mean(rewards(groups)))
        made = [t for g in groups for t in g.trajectories]
        result.called.append(mean([float(bool(t.metrics.get("called"))) for t in made]))
        result.rollout_seconds += time.perf_counter() - rollout_started
        config["learning_rate"] = args.lr * min(1.0, (i + 1) / args.rl_warmup)
        with watch.phase("rl jobs"):
            job = client.training_jobs.create(
                model_id=model.id, trajectory_groups=groups, experimental_config=config
            )
            checkpoint = job.wait(progress=False, poll_interval=0.05)
        step = checkpoint.step
        result.trainable.append(int(checkpoint.metrics.get("data/step_num_groups_trainable", 0)))
        result.rss_steps.append((watch.now(), watch.memory()))
        print(f"RL step {i + 1:3d}: sampled reward {result.curve[-1]:.3f}", flush=True)
        if pid is not None:
            print(f"server RSS after RL step {i + 1}: {result.rss_steps[-1][1] / 2**30:.3f} GiB", flush=True)
        if (i + 1) % args.eval_every == 0 or i + 1 == args.rl_steps:
            eval_started = time.perf_counter()
            result.eval_curve.append((i + 1, *evaluate(step)))
            eval_seconds += time.perf_counter() - eval_started
            print(f"held-out success after {i + 1} RL steps: {result.eval_curve[-1][1]:.3f}", flush=True)
    result.rl_seconds = time.perf_counter() - rl_started - eval_seconds
    result.wall_seconds = time.perf_counter() - started
    watch.close()
    return result


def command() -> str:
    """This run's command line, as the docs quote it."""
    return shlex.join(["python", "bench/learn_agent.py", *sys.argv[1:]])


def report(result: Result, args: argparse.Namespace, section: str = SECTION) -> str:
    steps = len(result.curve)
    load = " / ".join(f"{v:.1f}" for v in os.getloadavg())
    blocks = " ".join(f"{mean(result.curve[i : i + 10]):.2f}" for i in range(0, steps, 10))
    # the evaluations' wall minutes: the base's, each SFT job's, then each RL evaluation's (step 0 is
    # the last SFT job's)
    sft_minutes = result.eval_minutes[1 : 1 + len(result.sft_curve)]
    rl_minutes = [*sft_minutes[-1:], *result.eval_minutes[1 + len(result.sft_curve) :]]
    sft_rows = "\n".join(
        f"| {b} | {s:.3f} | {g:.3f} | {m:.1f} |"
        for (b, s, g), m in zip(result.sft_curve, sft_minutes, strict=False)
    )
    rl_rows = "\n".join(
        f"| {s} | {t:.3f} | {g:.3f} | {m:.1f} |"
        for (s, t, g), m in zip(result.eval_curve, rl_minutes, strict=False)
    )
    start, end = result.eval_curve[0][1], result.eval_curve[-1][1]
    reached = "never" if result.target_minutes is None else f"{result.target_minutes:.1f} min"
    stopped = (
        f" (of {args.rl_steps}: --time-limit {args.time_limit:g} min)"
        if args.time_limit and steps < args.rl_steps
        else ""
    )
    model = "the built-in 1M-parameter model" if args.base_model == TINY else f"`{args.base_model}`"
    return f"""{section}

Produced by `{command()}` (2 CPU cores shared with the other work of the machine at the
time, load {load} at the end; {model}), through the HTTP API and the client only
(`--smoke` runs each step at the smallest size and writes nothing, tests/bench/test_bench_learning.py).
The task is code lookup (`toolkit.tasks.lookup`): the user asks `code kfz`, only the tool `get(key)`
knows the episode's code, so the model must call it and then answer with its result (two assistant
turns, both trained); success = the exact code and the end of the turn. Held-out success is measured on
{args.eval_samples} episodes of keys never trained on, at T=1 (sampled) and greedy.

- Base model: held-out success {result.base[0]:.3f} at T=1 (greedy {result.base[1]:.3f}).
- SFT warm start: {result.sft_batches} batches of {args.sft_batch_size} generated demonstrations at lr
  {args.sft_lr:g} ({args.sft_warmup} warm-up batches), in jobs of {args.sft_chunk} batches until the held-out
  success at T=1 reached {args.start_success}: {result.sft_seconds:.0f} s of jobs.
- RL: {steps} steps{stopped} in {result.rl_seconds:.0f} s ({result.rl_seconds / max(1, steps):.1f} s per step,
  of which {result.rollout_seconds / max(1, steps):.1f} s multi-turn rollouts; held-out evaluations excluded):
  per step {args.prompts} scenarios x {args.group_size} episodes at T=1 through `/v1/chat/completions` with
  `tools`, one RL job (`{json.dumps(result.config)}`).
- Held-out success at T=1: **{start:.3f} after SFT -> {end:.3f} after RL**.
- Wall time of the whole run (evaluations included): {result.wall_seconds / 60:.1f} min; held-out
  success at T=1 first at or above {args.target} at {reached} (evaluations every {args.eval_every} RL steps).
- Sampled reward of the training episodes ({args.prompts * args.group_size} per step), means over blocks
  of 10 steps: {blocks}

| SFT batches | held-out success (T=1) | greedy | wall min |
|---|---|---|---|
{sft_rows}

| RL step | held-out success (T=1) | greedy | wall min |
|---|---|---|---|
{rl_rows}

{costs(result.watch)}
"""


def slope(points: list[tuple[float, float]]) -> float:
    """The least-squares slope of ``points`` (0 for fewer than 2)."""
    if len(points) < 2:
        return 0.0
    mx, my = mean([x for x, _ in points]), mean([y for _, y in points])
    var = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / var if var else 0.0


def tiny_sft(threshold: float) -> str:
    """How many SFT examples the 1M model needed for held-out T=1 ``threshold``, from its section of
    docs/performance.md (the first row of its SFT table at or above it)."""
    text = (ROOT / "docs" / "performance.md").read_text()
    at = text.find(f"{SECTION}\n")
    if at < 0:
        return "its section of this page is missing"
    body = text[at : text.find("\n## ", at + 1)]
    size = re.search(r"SFT warm start: \d+ batches of (\d+)", body)
    rows = re.findall(r"^\| (\d+) \| (\d\.\d+) \| \d\.\d+ \|$", body, re.M)
    for batches, success in rows:
        if size and float(success) >= threshold:
            n = int(batches) * int(size[1])
            return f"{n} examples ({batches} batches of {size[1]}; held-out T=1 {success} there)"
    return f"more than its SFT table shows (never {threshold} within {rows[-1][0] if rows else 0} batches)"


def memory_report(result: Result, args: argparse.Namespace, chart: bool = True) -> str:
    """The server's RSS through the run (the curve written to :data:`RSS_FIGURE` if ``chart``), its
    peak and its slope from RL step to RL step; with :func:`report` the section :data:`SMOLLM2_SECTION`."""
    assert result.watch is not None
    gib = 2**30
    samples = [(t / 60, rss / gib) for t, rss in result.watch.rss if rss]
    steps = [(t / 60, rss / gib) for t, rss in result.rss_steps if rss]
    if not samples:
        return "The server's RSS was not measured (a server of another machine, or no pid)."
    if chart:
        line_chart(
            RSS_FIGURE,
            {"server RSS (every 2 s)": samples, "at the end of each RL step": steps},
            title=f"{args.base_model}: served, SFT, RL, held-out evaluations",
            xlabel="minutes since the run started (server up)",
            ylabel="RSS, GiB",
            markers=False,
        )
    peak = max(rss for _, rss in result.watch.rss)
    last = [(float(i), rss / 2**20) for i, (_, rss) in enumerate(result.rss_steps) if rss][-20:]
    per_step = slope(last)
    rss_steps = " ".join(f"{rss / gib:.2f}" for _, rss in result.rss_steps)
    verdict = "under" if peak < RSS_LIMIT else "**over**"
    examples = result.sft_batches * args.sft_batch_size
    return f"""Memory (the server process's RSS, sampled every 2 s from the run's start, the server already up
and the base loaded, {len(result.watch.rss)} samples):

- Peak **{peak / gib:.2f} GiB ({peak / 1e9:.2f} GB)**, {verdict} the 6 GB of issue 34.
- RSS at the end of each RL step (GiB): {rss_steps}
- Slope over the last {len(last)} RL steps (least squares): **{per_step:+.1f} MiB per RL step**
  ({per_step * len(last):+.0f} MiB over them); from {last[0][1] if last else 0:.0f} to
  {last[-1][1] if last else 0:.0f} MiB.

![Server RSS through the run](figures/{RSS_FIGURE.name})

SFT examples to the start: {examples} ({result.sft_batches} batches of {args.sft_batch_size}) for held-out
T=1 {result.sft_curve[-1][1] if result.sft_curve else 0:.3f} (stopped at {args.start_success}); the 1M
model needed {tiny_sft(args.start_success)}.
"""


def add_recipe_arguments(parser: argparse.ArgumentParser) -> None:
    """The recipe's options (SFT warm start, RL, evaluation) and the server's; those set to None here
    take their default from :data:`RECIPES` (:func:`parse`)."""
    parser.add_argument("--url")
    parser.add_argument("--key")
    parser.add_argument(
        "--base-model",
        default=TINY,
        help=f"the base to train (a LoRA adapter on any but {TINY}); a server of the bench's own serves it",
    )
    parser.add_argument("--sft-batch-size", type=int, default=16)
    parser.add_argument("--sft-lr", type=float, help="1e-3 (both models)")
    parser.add_argument(
        "--sft-warmup", type=int, help="SFT batches of linear lr warm-up (1M: 20, SmolLM2: 5)"
    )
    parser.add_argument("--sft-chunk", type=int, help="SFT batches per job (1M: 100, SmolLM2: 10)")
    parser.add_argument("--sft-max-batches", type=int, help="1M: 800, SmolLM2: 80")
    parser.add_argument(
        "--start-success", type=float, default=0.75, help="SFT until this held-out success (T=1)"
    )
    parser.add_argument("--rl-steps", type=int, default=30)
    parser.add_argument("--prompts", type=int, default=16, help="scenarios per RL step")
    parser.add_argument("--group-size", type=int, default=8, help="episodes per scenario")
    parser.add_argument("--lr", type=float, help="RL learning rate (1M: 2e-4, SmolLM2: 1e-4)")
    parser.add_argument("--pack", type=int, help="packed_sequence_length (both: 3072)")
    parser.add_argument("--iterations", type=int, help="num_iterations, passes (1M: 2, SmolLM2: 1)")
    parser.add_argument("--rl-warmup", type=int, default=1, help="RL steps of linear lr warm-up")
    parser.add_argument(
        "--kl", type=float, default=0.0, help="kl_penalty_coef to the SFT checkpoint (0: none)"
    )
    parser.add_argument("--eval-every", type=int, help="RL steps between evaluations (1M: 10, SmolLM2: 5)")
    parser.add_argument("--eval-samples", type=int, default=128)
    parser.add_argument(
        "--time-limit",
        type=float,
        help="minutes: no RL step that would end past them (the report says how many steps ran)",
    )
    parser.add_argument("--target", type=float, default=0.8, help="report when held-out T=1 first reaches it")
    parser.add_argument(
        "--smoke", action="store_true", help="1 SFT job of 2 batches, 1 RL step, no write (CI)"
    )


def parse(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The options, those not given at the base model's defaults (:data:`RECIPES`); with ``--smoke``,
    every step at the smallest size (the start success is out of reach, so SFT runs to its cap)."""
    args = parser.parse_args()
    for option, value in RECIPES.get(args.base_model, RECIPES[SMOLLM2]).items():
        if getattr(args, option) is None:
            setattr(args, option, value)
    if args.smoke:
        args.sft_batch_size, args.sft_chunk, args.sft_max_batches, args.start_success = 8, 2, 2, 2.0
        args.rl_steps, args.prompts, args.group_size, args.eval_every, args.eval_samples = 1, 2, 2, 1, 4
    return args


def serve(args: argparse.Namespace) -> list[str]:
    """The ``toolkit serve`` options of a server of the bench's own: the built-in models, or the base."""
    return [] if args.base_model == TINY else ["--base-model", args.base_model]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_recipe_arguments(parser)
    parser.add_argument("--dump", help="a JSON file for the run's raw figures")
    parser.add_argument(
        "--no-write",
        action="store_true",
        help=f"print only (else the section of docs/performance.md: {SECTION!r} for {TINY}, "
        f"{SMOLLM2_SECTION!r} and {RSS_FIGURE.name} for another base)",
    )
    args = parse(parser)
    with learning_server(args.url, args.key, "learn-agent-", serve(args)) as (client, pid):
        result = run(client, args, pid=pid)
    if args.dump:  # the raw figures, should the report fail
        raw = {k: v for k, v in vars(result).items() if k != "watch"}
        if result.watch is not None:
            raw["rss"], raw["phases"] = result.watch.rss, {k: vars(p) for k, p in result.watch.phases.items()}
        Path(args.dump).write_text(json.dumps(raw))
    if args.base_model == TINY:
        text = report(result, args)
        print(text)
        if not (args.no_write or args.smoke):
            write_section(SECTION, text)
        return
    write = not (args.no_write or args.smoke)
    text = f"{report(result, args, SMOLLM2_SECTION)}\n{memory_report(result, args, chart=write)}"
    print(text)
    if write:
        write_section(SMOLLM2_SECTION, text)


if __name__ == "__main__":
    main()
