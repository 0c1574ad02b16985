"""The training half of bench/bench_lora.py, on a ~100M-parameter Qwen3-shaped model built from a
config (random weights, no download).

- ``bench_training``: SFT step time (wall clock, and CPU time of the process, which other load on
  the machine disturbs less) and peak memory of a LoRA adapter (ART's defaults: r=8,
  alpha=16, the 7 projections) versus full fine-tuning, through the server's own trainer
  (``run_sft`` on a ``Policy``) in the server's placement of ``--device`` (bfloat16 on GPUs), each
  mode in a fresh process so that its peak memory is its own;
  ``training_table`` prints it as Markdown. ``smoke`` runs a tiny model in seconds.
"""

from __future__ import annotations

import multiprocessing
import resource
import statistics
import time
from typing import Any

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from toolkit.server.engine.device import pick_placement
from toolkit.server.training import lora
from toolkit.server.training.policy import TRAINER_THREADS, Policy
from toolkit.server.training.sequences import Sample
from toolkit.server.training.trainer import run_sft
from toolkit.types.training import LoRAConfig

# ~100M parameters (tied embeddings): 12 blocks of width 768, the shape of a small Qwen3
FULL_SIZE: dict[str, Any] = {
    "vocab_size": 32_000,
    "hidden_size": 768,
    "intermediate_size": 2048,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "num_key_value_heads": 4,
    "head_dim": 64,
    "tie_word_embeddings": True,
}
SMOKE_SIZE: dict[str, Any] = {
    **FULL_SIZE,
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
}
MODES = ("lora", "full")


def _rss_mib() -> float:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _train(
    mode: str, size: dict[str, Any], device: str, batch: int, length: int, steps: int
) -> dict[str, Any]:
    """One mode in this (fresh) process: build the model on ``device`` in the dtype the server trains
    in there (``pick_placement``: bfloat16 on GPUs, float32 on the CPU), then ``steps`` SFT steps
    after a warm-up."""
    torch.set_num_threads(TRAINER_THREADS)
    torch.manual_seed(0)
    placement = pick_placement(device)
    cuda = placement.device.type == "cuda"  # also cuda:N
    model = Qwen3ForCausalLM(Qwen3Config(**size)).to(placement.device, placement.dtype)
    adapter = lora.attach(model, LoRAConfig(), "bench/qwen3-100m") if mode == "lora" else None
    policy = Policy("bench", 0, model, adapter)
    params = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in policy.parameters())
    if cuda:
        torch.cuda.reset_peak_memory_stats(placement.device)
    loaded = _rss_mib()
    tokens = torch.randint(0, size["vocab_size"], (steps + 1, batch, length)).tolist()
    batches = [[Sample(seq, [True] * length) for seq in step] for step in tokens]
    times: list[tuple[float, float]] = []  # (wall, CPU) seconds of each step
    last = (time.perf_counter(), time.process_time())

    def on_step(_: dict[str, float]) -> None:
        nonlocal last
        if cuda:
            torch.cuda.synchronize(placement.device)
        now = (time.perf_counter(), time.process_time())
        times.append((now[0] - last[0], now[1] - last[1]))
        last = now

    run_sft(policy, batches, [1e-4] * len(batches), pad_id=0, chunk_size=length, on_step=on_step)
    peak = torch.cuda.max_memory_allocated(placement.device) / 2**20 if cuda else _rss_mib() - loaded
    return {
        "mode": mode,
        "placement": f"{placement.device} ({str(placement.dtype).removeprefix('torch.')})",
        "params_m": params / 1e6,
        "trainable_m": trainable / 1e6,
        "step_s": statistics.median(t[0] for t in times[1:]),  # the first step warms up
        "cpu_s": statistics.median(t[1] for t in times[1:]),
        "peak_mib": peak,
    }


def bench_training(
    *, device: str = "cpu", smoke: bool = False, batch: int = 2, length: int = 128, steps: int = 4
) -> list[dict[str, Any]]:
    """SFT step time (median, seconds) and peak memory (MiB: CUDA allocations, or on CPU the growth
    of the peak resident memory over the loaded model: gradients, AdamW state, activations) of a
    LoRA adapter and of full fine-tuning, each in its own process."""
    size = SMOKE_SIZE if smoke else FULL_SIZE
    if smoke:
        batch, length, steps = 2, 16, 2
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1, maxtasksperchild=1) as pool:
        return [pool.apply(_train, (mode, size, device, batch, length, steps)) for mode in MODES]


def training_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"training on {rows[0]['placement']}",
        "",
        "| training | parameters (M) | trainable (M) | SFT step, wall (s) | SFT step, CPU (s)"
        " | peak memory (MiB) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        name = "LoRA r=8, 7 projections" if r["mode"] == "lora" else "full fine-tuning"
        lines.append(
            f"| {name} | {r['params_m']:.1f} | {r['trainable_m']:.2f} | {r['step_s']:.3g} | {r['cpu_s']:.3g}"
            f" | {r['peak_mib']:.0f} |"
        )
    return "\n".join(lines)
