"""The serving half of bench/bench_lora.py (``bench_serving``, ``serving_table``): decode tokens/s
of the engine for 16 concurrent requests spread over 1, 4 and 16 LoRA adapters, against the same 16
requests on the base model alone.

The model is Qwen3-shaped, ~100M parameters (hidden 768, 16 layers, 12 query / 4 key-value heads of
64, MLP 2048, the byte tokenizer's 260-token vocabulary, tied embeddings), random weights built from
a config by ``toolkit.server.engine.random_models.write_folder`` (no download); adapters are peft
folders of rank ``--rank`` on all seven projections, random A and B, written by peft's
``save_pretrained`` (as the server writes LoRA checkpoints). Requests go straight to the engine (no
HTTP), greedy with EOS ignored so each decodes exactly ``--tokens`` tokens; a first untimed round
loads the weights and makes the adapters resident, then the cases run ``--repeats`` times
interleaved, each keeping its best round (the machine's other load varies). With more than one
adapter in a batch, both ways of applying them are measured: a pair of matmuls per adapter over its
rows (``grouped``) and per-row gathered weights in batched matmuls (``gathered``); the engine
switches from the first to the second above ``GROUPED_UP_TO`` adapters. Last, each case's forward
step alone (the base runner's decode over the 16 rows, best of 9): the LoRA cost without the
scheduler and with less noise from the machine's load (on CUDA, timed between
``torch.cuda.synchronize`` calls).
``--smoke``: a 2-layer model and 4 tokens (under a minute; CI checks that the script runs). Prints a
Markdown table (the figures of docs/performance.md).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel

from toolkit.server.engine import adapter_stack
from toolkit.server.engine.device import pick_placement
from toolkit.server.engine.engine import Engine
from toolkit.server.engine.events import Failed, Finished, Started
from toolkit.server.engine.kv_pool import BLOCK, KVPool
from toolkit.server.engine.model import from_folder
from toolkit.server.engine.random_models import write_folder
from toolkit.server.engine.request import Request, Weights
from toolkit.server.engine.sampling import SamplingParams
from toolkit.server.engine.template import render_chat
from toolkit.server.training import lora
from toolkit.types.training import LoRAConfig

CONCURRENT = 16
SPREADS = (1, 4, 16)
# ~100M parameters over the byte tokenizer (random_models' Qwen3: q/k norms, tied embeddings)
FULL_SHAPE: dict[str, Any] = {
    "hidden_size": 768,
    "num_attention_heads": 12,
    "num_key_value_heads": 4,
    "head_dim": 64,
    "num_hidden_layers": 16,
    "intermediate_size": 2048,
    "max_position_embeddings": 1024,
}


def write_base(folder: Path, smoke: bool) -> PreTrainedModel:
    """A servable folder of a random Qwen3 model (``random_models.write_folder``); returns the model."""
    shape = {**FULL_SHAPE, "num_hidden_layers": 2} if smoke else FULL_SHAPE
    return write_folder(folder, "qwen3", seed=0, **shape)


def write_adapters(folders: list[Path], model: PreTrainedModel, rank: int) -> None:
    """One peft LoRA adapter per folder (rank ``rank``, alpha ``2 * rank``, the seven projections),
    written by peft's ``save_pretrained``, each with its own random A and B."""
    adapter = lora.attach(model, LoRAConfig(rank=rank, alpha=2 * rank), "bench/qwen3-100m")
    weights = [p for name, p in adapter.named_parameters() if "lora_" in name]
    for seed, folder in enumerate(folders):
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in weights:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.02)
        lora.save(adapter, folder)


async def decode_round(
    engine: Engine, prompt: list[int], weights: list[Weights], tokens: int
) -> tuple[float, float]:
    """One request per ``weights`` entry, submitted together: (tokens/s over the whole round, decode
    tokens/s from the moment every prompt was prefilled)."""
    params = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True)
    start = time.perf_counter()

    async def one(i: int, w: Weights) -> tuple[float, int]:
        req = Request(id=f"r{i}", weights=w, prompt_ids=prompt, params=[params], guides=[None], stream=False)
        queue = engine.submit(req)
        started = start
        while True:
            event = await queue.get()
            if isinstance(event, Failed):
                raise event.error
            if isinstance(event, Started):
                started = time.perf_counter()
            if isinstance(event, Finished):
                return started, len(event.token_ids)

    results = await asyncio.gather(*(one(i, w) for i, w in enumerate(weights)))
    end = time.perf_counter()
    produced = sum(n for _, n in results)
    prefilled = max(t for t, _ in results)
    return produced / (end - start), (produced - len(results)) / (end - prefilled)


def step_ms(engine: Engine, prompt: list[int], weights: list[Weights], grouped_up_to: int) -> float:
    """The base runner's decode step over ``CONCURRENT`` rows through ``weights``' adapter slots, alone
    (best of 9; the engine thread idle, the adapters resident): the forward without scheduling."""
    adapter_stack.GROUPED_UP_TO = grouped_up_to
    routes = [engine.weights.route(w, 1, ()) for w in weights]
    slots = [route.adapter for route in routes if route is not None]
    runner = engine.weights.base
    kv = KVPool(
        runner.kv_shape, runner.device, len(slots) * runner.kv_shape.token_bytes * (len(prompt) + 2 * BLOCK)
    )
    tables: list[list[int]] = [[] for _ in slots]
    for table in tables:
        assert kv.grow(table, len(prompt) + 1)
    cuda = runner.device.type == "cuda"  # kernels run asynchronously there: wait for them
    times = []
    for _ in range(10):
        if cuda:
            torch.cuda.synchronize(runner.device)
        start = time.perf_counter()
        runner.decode(kv, tables, [prompt[-1]] * len(slots), [len(prompt)] * len(slots), slots)
        if cuda:
            torch.cuda.synchronize(runner.device)
        times.append(time.perf_counter() - start)
    for route in routes:
        if route is not None:
            engine.weights.release(route)
    return min(times[1:]) * 1000


def bench_serving(
    device: str, tokens: int, rank: int, smoke: bool, threads: int, repeats: int
) -> list[tuple[str, float, float, float]]:
    """(row label, tokens/s, decode tokens/s, forward step ms) for the base alone and each adapter
    spread (and way of applying them)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = write_base(root / "base", smoke)
        params = sum(p.numel() for p in model.parameters())
        adapters = [root / f"lora{i}" for i in range(max(SPREADS))]
        write_adapters(adapters, model, rank)
        del model
        spec = from_folder(root / "base")
        engine = Engine.for_model(
            spec, max_num_seqs=CONCURRENT, placement=pick_placement(device), threads=threads
        )
        engine.start()
        prompt = engine.codec.encode(
            render_chat(
                spec.chat_template,
                [{"role": "user", "content": "Tell me a story."}],
                add_generation_prompt=True,
                continue_final_message=False,
            )
        )
        cases: list[tuple[str, list[Weights], int]] = [
            ("base model alone", [Weights("base")] * CONCURRENT, 0)
        ]
        for spread in SPREADS:
            weights = [Weights(f"lora:{i % spread}", adapters[i % spread]) for i in range(CONCURRENT)]
            ways = [("grouped", CONCURRENT), ("gathered", 0)] if spread > 1 else [("", CONCURRENT)]
            for way, grouped_up_to in ways:
                label = f"{spread} adapter{'s' if spread > 1 else ''}" + (f", {way}" if way else "")
                cases.append((label, weights, grouped_up_to))
        best: dict[str, tuple[float, float]] = {}
        try:
            for _, weights, grouped_up_to in cases:  # load, make resident, warm up
                adapter_stack.GROUPED_UP_TO = grouped_up_to
                asyncio.run(decode_round(engine, prompt, weights, min(tokens, 4)))
            for _ in range(repeats):  # the cases interleaved; each keeps its best round
                for label, weights, grouped_up_to in cases:
                    adapter_stack.GROUPED_UP_TO = grouped_up_to
                    rate, decode = asyncio.run(decode_round(engine, prompt, weights, tokens))
                    was = best.get(label, (0.0, 0.0))
                    best[label] = (max(was[0], rate), max(was[1], decode))
            steps = {
                label: step_ms(engine, prompt, weights, grouped_up_to)
                for label, weights, grouped_up_to in cases
            }
        finally:
            engine.stop()
        rows = [(label, *best[label], steps[label]) for label, _, _ in cases]
        print(
            f"{params / 1e6:.0f}M parameters on {engine.status.device} ({engine.status.dtype}), rank "
            f"{rank}, {CONCURRENT} concurrent requests of {len(prompt)} prompt + {tokens} new tokens, "
            f"{threads} torch threads"
        )
        return rows


def serving_table(rows: list[tuple[str, float, float, float]]) -> str:
    """The Markdown table of :func:`bench_serving`'s rows, ratios against the first (the base)."""
    _, base, base_decode, base_step = rows[0]
    lines = [
        "| requests on | tokens/s | vs base | decode tokens/s | vs base | forward step ms | vs base |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, rate, decode, step in rows:
        lines.append(
            f"| {label} | {rate:.0f} | {base / rate:.2f}x | {decode:.0f} | {base_decode / decode:.2f}x "
            f"| {step:.1f} | {step / base_step:.2f}x |"
        )
    return "\n".join(lines)
