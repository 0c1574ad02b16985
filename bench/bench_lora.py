"""LoRA benchmarks on a ~100M-parameter Qwen3-shaped model built from a config (random weights, no
download): serving (bench/lora_serving.py: tokens/s for 16 concurrent requests over 1, 4 and 16
adapters versus the base alone) and training (bench/lora_training.py: step time and peak memory of
LoRA versus full fine-tuning). Prints Markdown tables (the figures of docs/performance.md).

    .venv/bin/python bench/bench_lora.py [--half serving|training|both] [--device auto]
                                         [--tokens 64] [--rank 8] [--threads 2] [--repeats 3] [--smoke]

``--smoke``: tiny models in seconds (the test suite runs it, so a broken bench fails CI).
"""

from __future__ import annotations

import argparse

import torch
from lora_serving import bench_serving, serving_table
from lora_training import bench_training, training_table

from toolkit.server.engine.device import pick_placement
from toolkit.server.engine.engine import ENGINE_THREADS


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--half", choices=("serving", "training", "both"), default="both")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda[:N] or mps")
    parser.add_argument("--tokens", type=int, default=64, help="serving: new tokens per request")
    parser.add_argument("--rank", type=int, default=8, help="serving: adapter rank")
    parser.add_argument(
        "--threads", type=int, default=ENGINE_THREADS, help="serving: the engine's torch threads"
    )
    parser.add_argument("--repeats", type=int, default=3, help="serving: rounds per case (the best is kept)")
    parser.add_argument("--smoke", action="store_true", help="tiny models, one round, for CI")
    args = parser.parse_args()
    if args.half in ("serving", "both"):
        tokens, repeats = (4, 1) if args.smoke else (args.tokens, args.repeats)
        torch.set_num_threads(args.threads)  # the forward-step timing runs in this thread
        rows = bench_serving(args.device, tokens, args.rank, args.smoke, args.threads, repeats)
        print(serving_table(rows))
    if args.half in ("training", "both"):
        device = str(pick_placement(args.device).device)
        print(training_table(bench_training(device=device, smoke=args.smoke)))


if __name__ == "__main__":
    main()
