"""The CUDA-graph half of bench/gpu.py: one decode step's forward, in-process on the engine's runner
and KV pool (no HTTP, no scheduler, no sampling), per batch size, three ways:

- ``plain``: :meth:`~toolkit.server.engine.runner.Runner.decode`, the rows as they come (the CPU's
  decode);
- ``eager``: at the bucket's fixed shapes, run eagerly (``toolkit serve --enforce-eager`` on a GPU);
- ``graphs``: the same, captured once as a CUDA graph and replayed (the default on a GPU; not on the
  CPU).

Each runs ``steps`` steps from the same prompts (one per row, differing in their last token), each
step timed between ``torch.cuda.synchronize`` calls, the figure the median of the steps after the
first (which captures). Then whether the graphs replay the eager kernels: every step's logits equal
bit for bit, and the tokens of greedy and of seeded T=1 decoding (a CPU generator per row) the same.
At the batch of the adapters' count, one more way: ``graphs`` with every row on its own LoRA adapter
(rank 8, the 7 projections), against the base alone.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from toolkit.server.engine.decode_graphs import DecodeGraphs
from toolkit.server.engine.kv_pool import BLOCK, KVPool
from toolkit.server.engine.lora import LoraAdapter
from toolkit.server.engine.request import Weights
from toolkit.server.engine.runner import Runner


def decode_run(
    runner: Runner,
    prompt: list[int],
    batch: int,
    steps: int,
    way: str,
    slots: list[int] | None,
    seed: int | None,
) -> dict[str, Any]:
    """``steps`` decode steps of ``batch`` rows one ``way``: greedy, or at T=1 from generators seeded
    with ``seed + row``; the step times (s), every step's logits (on the CPU), the tokens chosen and,
    for graphs, what capturing cost."""
    prompts = [[*prompt, 65 + i % 26] for i in range(batch)]
    kv = KVPool(
        runner.kv_shape,
        runner.device,
        batch * runner.kv_shape.token_bytes * (len(prompts[0]) + steps + 2 * BLOCK),
    )
    tables: list[list[int]] = [[] for _ in prompts]
    assert all(kv.grow(t, len(p)) for t, p in zip(tables, prompts, strict=True))
    last, _ = runner.prefill(kv, tables, prompts, [0] * batch, None, slots)
    graphs = None if way == "plain" else DecodeGraphs(runner, kv, batch, capture=way == "graphs")
    generators = None if seed is None else [torch.Generator().manual_seed(seed + i) for i in range(batch)]
    sync = (lambda: torch.cuda.synchronize(runner.device)) if runner.device.type == "cuda" else (lambda: None)
    tokens, positions = pick(last.float().cpu(), generators), [len(p) for p in prompts]
    times, logits_seen, chosen = [], [], [tokens]
    for _ in range(steps):
        assert all(kv.writable(t, at) for t, at in zip(tables, positions, strict=True))
        sync()
        start = time.perf_counter()
        if graphs is None:
            logits = runner.decode(kv, tables, tokens, positions, slots)
        else:
            step = graphs.step(tables, tokens, positions, slots)
            assert step is not None
            logits = step
        sync()
        times.append(time.perf_counter() - start)
        logits_seen.append(logits.float().cpu())
        tokens, positions = pick(logits_seen[-1], generators), [p + 1 for p in positions]
        chosen.append(tokens)
    stats = graphs.stats if graphs is not None else None
    return {"times": times, "logits": logits_seen, "tokens": chosen, "stats": stats}


def pick(logits: Tensor, generators: list[torch.Generator] | None) -> list[int]:
    """Greedy tokens, or one T=1 draw per row from its generator."""
    if generators is None:
        return [int(t) for t in logits.argmax(-1)]
    probs = logits.softmax(-1)
    return [int(torch.multinomial(p, 1, generator=g)) for p, g in zip(probs, generators, strict=True)]


def graph_costs(
    runner: Runner, prompt: list[int], batches: tuple[int, ...], steps: int, adapters: list[Path]
) -> list[dict[str, Any]]:
    """Per batch size: each way's median step (ms); on CUDA, what capturing cost and whether the
    graphs' logits and tokens (greedy and seeded) are the eager fixed step's, and at
    ``len(adapters)`` rows the graphs with a LoRA adapter per row. The plain step's tokens and
    largest logit difference against the fixed one, everywhere."""
    capture = runner.device.type == "cuda"
    ways = ("plain", "eager", "graphs") if capture else ("plain", "eager")
    slots = [load(runner, folder) for folder in adapters] if capture else []
    results = []
    for batch in batches:
        row: dict[str, Any] = {"batch": batch, "steps": steps}
        runs = {way: decode_run(runner, prompt, batch, steps, way, None, None) for way in ways}
        for way, run in runs.items():
            row[f"{way}_ms"] = statistics.median(run["times"][1:]) * 1000
        row["plain_tokens_same"] = runs["plain"]["tokens"] == runs["eager"]["tokens"]
        pairs = zip(runs["plain"]["logits"], runs["eager"]["logits"], strict=True)
        row["plain_max_abs_diff"] = max(float((a - b).abs().max()) for a, b in pairs)
        if capture:
            seeded = {way: decode_run(runner, prompt, batch, steps, way, None, 1) for way in ways[1:]}
            pairs = zip(runs["graphs"]["logits"], runs["eager"]["logits"], strict=True)
            row["identical_logits_steps"] = sum(torch.equal(a, b) for a, b in pairs)
            row["greedy_tokens_same"] = runs["graphs"]["tokens"] == runs["eager"]["tokens"]
            row["seeded_tokens_same"] = seeded["graphs"]["tokens"] == seeded["eager"]["tokens"]
            stats = runs["graphs"]["stats"]
            row["captured"], row["capture_s"] = stats.captured, stats.capture_s
            row["capture_reserved_mib"] = stats.reserved_bytes / 2**20
            if batch == len(slots):
                lora = decode_run(runner, prompt, batch, steps, "graphs", slots, None)
                row["adapters_ms"] = statistics.median(lora["times"][1:]) * 1000
        results.append(row)
    return results


def load(runner: Runner, folder: Path) -> int:
    """The adapter slot of ``folder`` on ``runner``, made resident."""
    assert runner.adapters is not None
    slot = runner.adapters.acquire(
        Weights(f"lora:{folder.name}", folder), lambda: LoraAdapter.read(folder, runner.device, runner.dtype)
    )
    assert slot is not None
    return slot


GRAPHS_HEADER = (
    "batch",
    "as it comes, ms",
    "fixed shapes, eager, ms",
    "CUDA graph, ms",
    "graph vs as it comes",
    "capture s / MiB",
    "graph logits = eager (steps)",
    "greedy / seeded tokens = eager",
    "as it comes: tokens = fixed, largest logit difference",
    "graph, a LoRA adapter per row, ms",
)


def graphs_table(results: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    rows = []
    yes = {True: "yes", False: "**NO**"}
    for r in results:
        graph = r.get("graphs_ms")
        rows.append(
            (
                str(r["batch"]),
                f"{r['plain_ms']:.2f}",
                f"{r['eager_ms']:.2f}",
                "n/a" if graph is None else f"{graph:.2f}",
                "n/a" if graph is None else f"{r['plain_ms'] / graph:.2f}x",
                "n/a" if graph is None else f"{r['capture_s']:.2f} / {r['capture_reserved_mib']:,.0f}",
                "n/a" if graph is None else f"{r['identical_logits_steps']} of {r['steps']}",
                "n/a"
                if graph is None
                else f"{yes[r['greedy_tokens_same']]} / {yes[r['seeded_tokens_same']]}",
                f"{yes[r['plain_tokens_same']]}, {r['plain_max_abs_diff']:.2g}",
                f"{r['adapters_ms']:.2f}" if "adapters_ms" in r else "",
            )
        )
    return rows
