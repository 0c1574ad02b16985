"""The sampling half of bench/gpu.py: what sampling on the CPU costs a decode step on a GPU, and what
device sampling (``TOOLKIT_DEVICE_SAMPLING=1``) makes of it, measured in-process on the engine's own
runner and sampler (no HTTP, no scheduler); and the memory figures of processes on the device.

For each batch size, after a prefill of the prompt into every row: the runner's decode step (the
forward), then on its logits ``[B, V]`` (float32) each way of sampling, greedy and at T=1 with a
seeded generator per row (as RL rollouts are): on the CPU (``=0``: the logits copied there, the
pipeline there), device sampling (the pipeline on the device, the race's random numbers drawn on the CPU by
each row's generator, rows in threads, and copied there), device sampling with the random numbers
drawn on the device too (``TOOLKIT_DEVICE_SAMPLING=device``: a generator per seeded request there),
the copy alone and the random numbers alone (in order, and in threads). Each figure is the median
of ``steps`` runs, timed between ``torch.cuda.synchronize`` calls on CUDA. Then the tokens of both
ways from generators seeded alike on the same logits: device sampling must pick the same ones; and
with device numbers each seeded row's tokens alone and in the whole batch: they must be the same.
"""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from toolkit.server.engine.kv_pool import BLOCK, KVPool
from toolkit.server.engine.runner import Runner
from toolkit.server.engine.sampling import DeviceRandom, SamplingParams, race_noise, sample

GREEDY = SamplingParams(max_tokens=1, temperature=0.0)
T1 = SamplingParams(max_tokens=1, temperature=1.0)


def seeded_t1(seed: int) -> SamplingParams:
    return SamplingParams(max_tokens=1, temperature=1.0, seed=seed)


@dataclass(eq=False)  # hashable by identity: DeviceRandom keeps each row's generator
class Row:
    """A :class:`~toolkit.server.engine.sampling.RowState` with its own seeded generator."""

    params: SamplingParams
    generator: torch.Generator | None
    prompt_ids: list[int]
    output_ids: list[int] = field(default_factory=list)
    stop_ids: frozenset[int] = frozenset()
    grammar_mask: Tensor | None = None


def rows(batch: int, params: SamplingParams, prompt: list[int]) -> list[Row]:
    return [Row(params, torch.Generator().manual_seed(i), prompt) for i in range(batch)]


def device_rows(batch: int, prompt: list[int]) -> list[Row]:
    """Rows seeded through their parameters, as requests with ``seed`` are (what DeviceRandom reads)."""
    return [Row(seeded_t1(i), None, prompt) for i in range(batch)]


def device_random_repeatable(logits: Tensor, prompt: list[int], steps: int) -> tuple[int, int]:
    """(rows, of them) whose device-drawn tokens are the same in the whole batch as when the row is
    sampled alone, over ``steps`` steps: a seed's tokens must not depend on the rest of the batch."""
    batch = logits.shape[0]
    together, fallback = DeviceRandom(logits.device), torch.Generator().manual_seed(0)
    crowd = device_rows(batch, prompt)
    alone = [(DeviceRandom(logits.device), row) for row in device_rows(batch, prompt)]
    same = 0
    for _ in range(steps):
        batched = sample(logits, crowd, fallback, device_random=together).tokens
        singles = [
            sample(logits[i : i + 1], [row], fallback, device_random=d).tokens[0]
            for i, (d, row) in enumerate(alone)
        ]
        same += sum(a == b for a, b in zip(batched, singles, strict=True))
    return same, batch * steps


def synced(device: torch.device) -> Callable[[], None]:
    return (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)


def median_ms(run: Callable[[], object], device: torch.device, steps: int) -> float:
    """Median milliseconds of ``run`` over ``steps`` calls after one untimed call."""
    sync = synced(device)
    run()
    times = []
    for _ in range(steps):
        sync()
        start = time.perf_counter()
        run()
        sync()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def sampling_costs(
    runner: Runner, prompt: list[int], batch: int, steps: int, pool: ThreadPoolExecutor
) -> dict[str, Any]:
    """One batch size's figures (milliseconds per decode step, and tokens that agree)."""
    device = runner.device
    kv = KVPool(runner.kv_shape, device, batch * runner.kv_shape.token_bytes * (len(prompt) + 2 * BLOCK))
    tables: list[list[int]] = [[] for _ in range(batch)]
    for table in tables:
        assert kv.grow(table, len(prompt) + 1)
    runner.prefill(kv, tables, [prompt] * batch, [0] * batch)
    tokens, positions = [prompt[-1]] * batch, [len(prompt)] * batch
    logits = runner.decode(kv, tables, tokens, positions)
    fallback = torch.Generator().manual_seed(0)
    greedy, seeded = rows(batch, GREEDY, prompt), rows(batch, T1, prompt)
    on_device, on_device_rows = DeviceRandom(device), device_rows(batch, prompt)
    every = [True] * batch
    figures: dict[str, Any] = {
        "batch": batch,
        "vocab": int(logits.shape[-1]),
        "forward_ms": median_ms(lambda: runner.decode(kv, tables, tokens, positions), device, steps),
        "cpu_greedy_ms": median_ms(lambda: sample(logits.cpu(), greedy, fallback), device, steps),
        "cpu_t1_ms": median_ms(lambda: sample(logits.cpu(), seeded, fallback), device, steps),
        "device_greedy_ms": median_ms(lambda: sample(logits, greedy, fallback, pool), device, steps),
        "device_t1_ms": median_ms(lambda: sample(logits, seeded, fallback, pool), device, steps),
        "copy_ms": median_ms(lambda: logits.cpu(), device, steps),
        "noise_ms": median_ms(lambda: race_noise(logits.shape, seeded, every, fallback), device, steps),
        "noise_threads_ms": median_ms(
            lambda: race_noise(logits.shape, seeded, every, fallback, pool), device, steps
        ),
        "device_random_t1_ms": median_ms(
            lambda: sample(logits, on_device_rows, fallback, device_random=on_device), device, steps
        ),
        "device_noise_ms": median_ms(
            lambda: on_device.noise(logits.shape, on_device_rows, every), device, steps
        ),
    }
    figures["device_random_same"], figures["device_random_compared"] = device_random_repeatable(
        logits, prompt, min(steps, 5)
    )
    same = total = 0
    for params in (GREEDY, T1):
        on_cpu, on_device = rows(batch, params, prompt), rows(batch, params, prompt)
        for _ in range(steps):
            a = sample(logits.cpu(), on_cpu, fallback).tokens
            b = sample(logits, on_device, fallback, pool).tokens
            same += sum(x == y for x, y in zip(a, b, strict=True))
            total += batch
    figures["same_tokens"], figures["tokens_compared"] = same, total
    return figures


def sampling_table(results: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    """Rows of the sampling table: per batch size, the forward and each way of sampling (ms), and
    sampling's share of a decode step on the CPU and with device sampling (at T=1)."""
    out = []
    for r in results:
        today = r["cpu_t1_ms"] / (r["forward_ms"] + r["cpu_t1_ms"])
        fixed = r["device_t1_ms"] / (r["forward_ms"] + r["device_t1_ms"])
        drawn = r["device_random_t1_ms"] / (r["forward_ms"] + r["device_random_t1_ms"])
        out.append(
            (
                str(r["batch"]),
                f"{r['forward_ms']:.2f}",
                f"{r['cpu_greedy_ms']:.2f} / {r['cpu_t1_ms']:.2f}",
                f"{r['device_greedy_ms']:.2f} / {r['device_t1_ms']:.2f}",
                f"{r['copy_ms']:.2f}",
                f"{r['noise_ms']:.2f} / {r['noise_threads_ms']:.2f}",
                f"{r['device_random_t1_ms']:.2f} ({r['device_noise_ms']:.2f})",
                f"{100 * today:.0f}% / {100 * fixed:.0f}% / {100 * drawn:.0f}%",
                f"{r['same_tokens']} of {r['tokens_compared']}",
                f"{r['device_random_same']} of {r['device_random_compared']}",
            )
        )
    return out


SAMPLING_HEADER = (
    "batch",
    "forward ms",
    "sampling on the CPU ms (greedy / T=1)",
    "device sampling ms (greedy / T=1)",
    "logits to the CPU ms",
    "random numbers ms (in order / in threads)",
    "random numbers on the device: T=1 sampling ms (numbers alone)",
    "sampling's share of a T=1 step (CPU / device / device numbers)",
    "same tokens",
    "device numbers: same tokens alone as in the batch",
)


def process_memory_mib(pid: int, device: torch.device) -> float | None:
    """Memory process ``pid`` holds on ``device``: its GPU memory by ``nvidia-smi`` on CUDA (what the
    caching allocator reserved at its peak, plus the CUDA context), its resident memory on the CPU;
    None where that cannot be read."""
    if device.type != "cuda":
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return None
    query = ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]
    try:
        lines = subprocess.run(query, capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in lines.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0] == str(pid) and parts[1].isdigit():
            return float(parts[1])
    return None


def device_used_mib(device: torch.device) -> float | None:
    """Memory in use on the whole GPU (every process), None on the CPU."""
    if device.type != "cuda":
        return None
    free, total = torch.cuda.mem_get_info(device)
    return (total - free) / 2**20
