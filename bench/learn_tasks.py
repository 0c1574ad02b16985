"""The agent recipe (SFT warm start, then RL) on the task suite (toolkit.tasks.suite), through the public
API only; prints each task's curve of held-out success at T=1 (docs/performance.md, "Agent task suite").

    python bench/learn_tasks.py                       # every task, each on a server of its own
    python bench/learn_tasks.py --task chain --lr 1e-4
    python bench/learn_tasks.py --smoke               # every step of every task at the smallest size

Per task: bench/learn_agent.py's recipe and options (SFT jobs until held-out success at T=1 reaches
--start-success or --sft-max-batches, then --rl-steps RL steps of --prompts x --group-size episodes,
held-out success measured every --eval-every steps on scenarios SFT and RL never saw).
"""

from __future__ import annotations

import argparse
import json
import os

from learn_agent import Result, add_recipe_arguments, mean, parse, run, serve
from learning_runs import costs, learning_server

from toolkit.tasks import lookup
from toolkit.tasks.suite import TASKS

CHOICES = {"lookup": lookup.TASK, **TASKS}  # lookup only when asked (--task lookup): learn_agent.py's task


def report(name: str, result: Result, args: argparse.Namespace) -> str:
    """One task's curve: the SFT warm start, then held-out success at T=1 (and greedy) along RL."""
    load = " / ".join(f"{v:.1f}" for v in os.getloadavg())
    start, end = result.eval_curve[0][1], result.eval_curve[-1][1]
    best = max(t for _, t, _ in result.eval_curve[1:]) if len(result.eval_curve) > 1 else start
    sft = ", ".join(f"{b}: {t:.3f}" for b, t, _ in result.sft_curve)
    rl = " -> ".join(f"{t:.3f}" for _, t, _ in result.eval_curve)
    greedy = " -> ".join(f"{g:.3f}" for _, _, g in result.eval_curve)
    called = " ".join(f"{mean(result.called[i : i + 5]):.2f}" for i in range(0, len(result.called), 5))
    blocks = " ".join(f"{mean(result.curve[i : i + 5]):.2f}" for i in range(0, len(result.curve), 5))
    warmup = f", lr warm-up over {args.rl_warmup} steps" if args.rl_warmup > 1 else ""
    trainable = " ".join(map(str, result.trainable))
    return f"""### {name}

- Base `{args.base_model}`: held-out T=1 {result.base[0]:.3f} (greedy {result.base[1]:.3f})
- SFT warm start: {result.sft_batches} batches of {args.sft_batch_size} at lr {args.sft_lr:g}
  ({result.sft_seconds:.0f} s of jobs); held-out T=1 after each job: {sft}
- RL: {len(result.curve)} steps of {args.prompts} x {args.group_size} ({result.rl_seconds:.0f} s,
  `{json.dumps(result.config)}`{warmup}); groups trained on per step: {trainable}
- Held-out T=1 at RL steps {", ".join(str(s) for s, _, _ in result.eval_curve)}: {rl}
  (greedy {greedy})
- **{start:.3f} after SFT -> {end:.3f} after RL** (best {best:.3f}); training reward, means of 5
  steps: {blocks}; episodes that got the tools' results: {called}
- Wall time {result.wall_seconds / 60:.1f} min, load {load} at the end

{costs(result.watch)}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_recipe_arguments(parser)
    parser.add_argument(
        "--task",
        choices=sorted(CHOICES),
        action="append",
        help="this task only (repeatable; default the suite's)",
    )
    args = parse(parser)
    for name in args.task or list(TASKS):
        with learning_server(args.url, args.key, f"learn-{name}-", serve(args)) as (client, pid):
            result = run(client, args, CHOICES[name], pid)
        print(report(name, result, args), flush=True)


if __name__ == "__main__":
    main()
