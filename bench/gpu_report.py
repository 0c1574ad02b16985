"""bench/gpu.py's report: its Markdown tables on stdout and, with ``--out``, every figure as JSON."""

from __future__ import annotations

import json
import time
from typing import Any

import torch
from bench_engine import table
from gpu_graphs import GRAPHS_HEADER, graphs_table
from gpu_sampling import SAMPLING_HEADER, sampling_table

from toolkit import __version__
from toolkit.server.engine.device import pick_placement
from toolkit.server.engine.engine import ENGINE_THREADS

NAME = "qwen3-0.6b-random"
STATIC = "generate, static cache"


def decode_rows(bench: Any, args: Any) -> list[tuple[str, ...]]:
    rates = bench.figures["decode_tokens_per_s"]
    rows = []
    for n in args.concurrency:
        r = {label: by_n[str(n)] for label, by_n in rates.items()}
        rows.append(
            (
                str(n),
                f"{r['engine greedy']:,.0f}",
                f"{r['generate']:,.0f}",
                f"{r['engine greedy'] / r['generate']:.2f}x",
                f"{r[STATIC]:,.0f}",
                f"{r['engine greedy'] / r[STATIC]:.2f}x",
                f"{r['engine T=1']:,.0f}",
                f"{r['device sampling greedy']:,.0f}",
                f"{r['device sampling T=1']:,.0f}",
                f"{r['device sampling T=1'] / r['engine T=1']:.2f}x",
            )
        )
    return rows


DECODE_HEADER = (
    "concurrent requests / batch",
    "engine over HTTP, CPU sampling, greedy, tokens/s",
    "generate, greedy, tokens/s",
    "ratio",
    "generate, static cache (compiled on CUDA)",
    "ratio",
    "engine, T=1 seeded",
    "device sampling, greedy",
    "device sampling, T=1 seeded",
    "T=1: device sampling vs CPU sampling",
)
TRAINING_HEADER = (
    "job (rank 8, 7 projections)",
    "through the API, s",
    "its gradient steps, s",
    "bare peft loop, s",
    "ratio",
    "gradient steps",
)


def report(bench: Any, args: Any) -> None:
    """Print the tables of the sections that ran, and any errors; write the JSON of ``--out``."""
    figures = bench.figures
    card = torch.cuda.get_device_name(bench.device) if bench.device.type == "cuda" else "cpu"
    total = time.perf_counter() - bench.started
    print(
        f"\n{card}: {NAME}, {args.parameters / 1e6:,.2f}M parameters, {args.weights / 2**20:,.1f} MiB in "
        f"{str(pick_placement(args.device).dtype).removeprefix('torch.')}; a {args.prompt_tokens}-token "
        f"prompt, {args.tokens} new tokens per request (EOS ignored); best of {args.rounds} interleaved "
        f"round(s); {total:.0f} s in all\n"
    )
    if "decode_tokens_per_s" in figures:
        table(DECODE_HEADER, decode_rows(bench, args))
        first = ", ".join(f"{s:.1f} s at {n}" for n, s in figures["static_generate_first_call_s"].items())
        print(
            f"\ngenerate with a static cache, first call per batch (compiling on CUDA, then running): {first}"
        )
    if "sampling" in figures:
        print(
            f"\nsampling per decode step, in-process on the engine's runner ({ENGINE_THREADS} torch "
            "threads):\n"
        )
        table(SAMPLING_HEADER, sampling_table(figures["sampling"]))
    if "graphs" in figures:
        print("\none decode step's forward, in-process on the engine's runner (no sampling):\n")
        table(GRAPHS_HEADER, graphs_table(figures["graphs"]))
    if "adapters" in figures:
        n, rates = figures["adapters"]["requests"], figures["adapters"]["tokens_per_s"]
        print()
        table(
            (f"{n} concurrent requests on", "tokens/s", "vs base"),
            [
                ("the base alone", f"{rates['base']:,.0f}", "1.00x"),
                (
                    f"{n} adapters, one each",
                    f"{rates['adapters']:,.0f}",
                    f"{rates['adapters'] / rates['base']:.2f}x",
                ),
            ],
        )
    if "training" in figures:
        print()
        rows = [
            (
                f"LoRA {label}",
                f"{t['api_s']:.3f}",
                f"{t['phases_s']['gradient steps']:.3f}",
                f"{t['bare_s']:.3f}",
                f"{t['ratio']:.2f}x",
                str(t["gradient_steps"]),
            )
            for label, t in figures["training"].items()
        ]
        table(TRAINING_HEADER, rows)
    print()
    table(
        ("memory on the device", "MiB"),
        [(where, "n/a" if mib is None else f"{mib:,.0f}") for where, mib in bench.memory.items()],
    )
    print()
    verdict = {True: "yes", False: "**NO**", None: "n/a"}
    table(
        ("nothing ran on the CPU unasked", "expected", "observed", "ok"),
        [(c["check"], c["expected"], c["observed"], verdict[c["ok"]]) for c in bench.checks],
    )
    print("\nseconds: " + ", ".join(f"{name} {sec:.1f}" for name, sec in bench.seconds.items()))
    for name, error in bench.errors.items():
        print(f"ERROR in {name}: {error}")
    if args.out is not None:
        import peft
        import transformers

        versions = {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "peft": peft.__version__,
        }
        document = {
            "card": card,
            "device": str(bench.device),
            "versions": {"toolkit": __version__, **versions},
            "model": {
                "name": NAME,
                "parameters": args.parameters,
                "parameter_bytes": args.weights,
                "smoke": args.smoke,
            },
            "prompt_tokens": args.prompt_tokens,
            "tokens_per_request": args.tokens,
            "rounds": args.rounds,
            "figures": figures,
            "memory_mib": bench.memory,
            "checks": bench.checks,
            "errors": bench.errors,
            "seconds": {**bench.seconds, "total": total},
        }
        args.out.write_text(json.dumps(document, indent=2))
        print(f"figures written to {args.out}")
