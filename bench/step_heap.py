"""The heap of a LoRA gradient step on the CPU: its peak resident memory and its time under glibc's
and torch's defaults, with torch's huge pages (``toolkit serve``'s default), and with glibc's mmap
threshold fixed at 4 MiB as well, each in a process of its own since both read their settings once
(docs/performance.md, "The heap of a gradient step").

    .venv/bin/python bench/step_heap.py [--threads 2] [--steps 5] [--smoke] [--no-write]

Each process takes the base model with a fresh LoRA adapter (the server's default) and runs
``--steps`` gradient steps of the trainer's loss (``token_logprobs``, its backward) on one minibatch
of random tokens, every token trained: 3,072 tokens (12 x 256) with its decoder layers recomputed, as
the trainer does above its activation budget, and 1,024 tokens (4 x 256) with its activations kept.
It reports the peak RSS above the RSS before the first step (sampled every 5 ms), the RSS after the
last step, and the seconds of the fastest step after the first (the first reads the weights in).

``--smoke``: a random 2-layer Llama with SmolLM2's vocabulary, 2 steps, the recomputed minibatch only
(tests/bench/test_bench_step_heap.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from learning_runs import write_section

SECTION = "## The heap of a gradient step"
MODEL = "toolkit/smollm2-135m-instruct"
SETTINGS: dict[str, dict[str, str]] = {
    "glibc's and torch's defaults": {"THP_MEM_ALLOC_ENABLE": "0"},
    "huge pages (`toolkit serve`'s default)": {"THP_MEM_ALLOC_ENABLE": "1"},
    "huge pages, `MALLOC_MMAP_THRESHOLD_=4194304 MALLOC_TRIM_THRESHOLD_=1073741824`": {
        "THP_MEM_ALLOC_ENABLE": "1",
        "MALLOC_MMAP_THRESHOLD_": "4194304",
        "MALLOC_TRIM_THRESHOLD_": "1073741824",
    },
}
SHAPES = {"3,072 tokens, layers recomputed": (12, 256, True), "1,024 tokens, kept": (4, 256, False)}
ALLOCATOR_VARIABLES = (
    "THP_MEM_ALLOC_ENABLE",
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TRIM_THRESHOLD_",
    "GLIBC_TUNABLES",
)


def child(args: argparse.Namespace) -> None:
    """One setting and shape, in this process: print its figures as one JSON line."""
    import psutil
    import torch

    from toolkit.server.training import lora, step_memory
    from toolkit.server.training.forward import make_batch, token_logprobs
    from toolkit.server.training.sequences import Sample
    from toolkit.types.training import LoRAConfig

    torch.set_num_threads(args.threads)
    model = load_model(args.smoke)
    lora.attach(model, LoRAConfig(), MODEL)
    model.eval()
    rows, length, recompute = SHAPES[args.shape]
    if args.smoke:
        rows, length = rows // 2, length // 4
    step_memory.ACTIVATION_BYTES = 0 if recompute else 1 << 50
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, model.config.vocab_size, (rows, length), generator=generator).tolist()
    batch = make_batch([Sample(t, [True] * length) for t in tokens], pad_id=0)
    process, peak, done = psutil.Process(), [0], threading.Event()

    def sample() -> None:
        while not done.wait(0.005):
            peak[0] = max(peak[0], process.memory_info().rss)

    start = process.memory_info().rss
    threading.Thread(target=sample, daemon=True).start()
    seconds = []
    for _ in range(args.steps):
        began = time.perf_counter()
        with step_memory.step_memory(model, batch.tokens.numel()):
            logp, _ = token_logprobs(model, batch, 1024)
        (logp * batch.mask).sum().backward()
        model.zero_grad(set_to_none=True)
        del logp
        seconds.append(time.perf_counter() - began)
    done.set()
    end = process.memory_info().rss
    fastest = min(seconds[1:] or seconds)
    print(json.dumps({"peak": max(peak[0], end) - start, "after": end - start, "seconds": fastest}))


def load_model(smoke: bool):  # type: ignore[no-untyped-def]
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    if smoke:
        torch.manual_seed(0)
        config = LlamaConfig(
            vocab_size=49_152,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
        )
        return LlamaForCausalLM(config)
    from toolkit.server.engine.model import resolve_base
    from toolkit.server.engine.sources import BaseSource

    spec = resolve_base(BaseSource(MODEL), Path(tempfile.mkdtemp()))
    return AutoModelForCausalLM.from_pretrained(spec.folder, dtype=torch.float32)


def measure(args: argparse.Namespace, setting: str, shape: str) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if k not in ALLOCATOR_VARIABLES} | SETTINGS[setting]
    command = [sys.executable, __file__, "--child", "--shape", shape, "--threads", str(args.threads)]
    command += ["--steps", str(args.steps)] + (["--smoke"] if args.smoke else [])
    out = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if out.returncode != 0:
        raise SystemExit(f"step_heap.py: {setting!r}, {shape!r} failed:\n{out.stderr[-3000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def report(rows: list[tuple[str, str, dict[str, float]]], args: argparse.Namespace) -> str:
    base = {shape: figures for setting, shape, figures in rows if setting == next(iter(SETTINGS))}
    lines = [
        SECTION,
        "",
        f"*One run, {time.strftime('%Y-%m-%d')}, `python bench/step_heap.py --threads {args.threads} --steps "
        f"{args.steps}`{' --smoke' if args.smoke else ''}. No test checks these figures: "
        "tests/bench/test_bench_step_heap.py runs `--smoke`.*",
        "",
        f"A LoRA gradient step of {'a random 2-layer Llama' if args.smoke else 'SmolLM2-135M'} on the CPU, "
        "each setting in a fresh process: peak RSS above the RSS before the first step, RSS left after the "
        "last step, and the fastest step's seconds against glibc's and torch's defaults in the same run.",
        "",
        "| minibatch | allocator | peak above start (GiB) | left after (GiB) | step (s) | time vs defaults |",
        "|---|---|---|---|---|---|",
    ]
    for setting, shape, f in rows:
        ratio = f["seconds"] / base[shape]["seconds"]
        lines.append(
            f"| {shape} | {setting} | {f['peak'] / 2**30:.2f} | {f['after'] / 2**30:.2f} | "
            f"{f['seconds']:.2f} | {ratio:.2f}x |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument(
        "--no-write", action="store_true", help=f"print only (else {SECTION!r} of docs/performance.md)"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--shape", choices=list(SHAPES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.smoke:
        args.steps = min(args.steps, 2)
    if args.child:
        child(args)
        return
    rows = []
    for shape in list(SHAPES)[: 1 if args.smoke else None]:
        for setting in SETTINGS:
            rows.append((setting, shape, measure(args, setting, shape)))
            print(f"{shape} | {setting}: {json.dumps(rows[-1][2])}", flush=True)
    text = report(rows, args)
    print(text)
    if not (args.no_write or args.smoke):
        write_section(SECTION, text)


if __name__ == "__main__":
    main()
