"""The real model on the CPU: the engine against transformers' ``generate``, and LoRA training through
the API against a bare peft loop, in one run on SmolLM2-135M-Instruct (docs/performance.md, "The real
model on the CPU").

    .venv/bin/python bench/real_model.py [--threads 2] [--dtype bfloat16] [--tokens 32] [--smoke]

- Decode: one chat prompt, greedy, the end token ignored, ``--tokens`` new tokens a request: the
  engine over HTTP (``toolkit serve --base-model ... --dtype``) at 1, 16 and 64 concurrent requests,
  and ``generate`` in this process in float32 (the model as it ships) at batch 1, 16 and 64; tokens per
  second of wall time and of CPU time of the process doing the work, best of ``--rounds``; the share
  of the engine's greedy tokens equal to ``generate``'s (all of them in float32).
- Time to the first token: one streamed request (p50 of 10) against ``generate`` of one token.
- LoRA training (rank 8, the server's default): an SFT job of ``--sft-batches`` batches of 16 lookup
  demonstrations and an RL job on 16 x 8 lookup episodes with seeded random rewards (every group
  trains; the server's default minibatches of 1,024 tokens), each from its POST to the first token of
  its checkpoint, against the bare peft loop (bench/training_bare.py: same weights, minibatches and
  loss, no HTTP, job or checkpoint) on the same data.
- One whole RL step of the agent recipe: 16 lookup scenarios x 8 episodes rolled out by the agent
  through ``/v1/chat/completions`` with tools, then the RL job: wall seconds.
- The server's peak resident memory over the run (sampled every 0.2 s).

``--smoke``: 4 tokens, 1 and 2 requests, one SFT batch, 2 x 2 episodes, on ``--base-model`` (the suite
runs it on the tiny built-in model with a LoRA adapter: tests/bench/test_bench_real_model.py).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psutil
import torch
from bench_engine import Rate, concurrently, metered
from bench_training import api_job, rewarded
from server_process import start_server
from training_bare import BareRL, BareSFT
from transformers import AutoModelForCausalLM

import toolkit as tk
from toolkit.server.engine.device import pick_placement
from toolkit.server.engine.model import resolve_base
from toolkit.server.engine.sources import BaseSource
from toolkit.server.training.config import resolve
from toolkit.tasks import lookup
from toolkit.types.training import ExperimentalTrainingConfig, LoRAConfig

MODEL = "toolkit/smollm2-135m-instruct"
MESSAGES = [{"role": "user", "content": "Write a short story about a robot who learns to paint."}]
LORA = LoRAConfig()
# the bare loop takes the sampler's logprobs as they are: so does the job (a seeded job recomputes them
# by default, one more forward pass over its minibatches)
RL_CONFIG = {"seed": 1, "learning_rate": 2e-5, "precalculate_logprobs": False}
SFT_BATCH, SFT_LR = 16, 1e-3


class PeakMemory:
    """The peak resident memory of process ``pid``, sampled in a thread every 0.2 s."""

    def __init__(self, pid: int) -> None:
        self.process, self.peak, self._stop = psutil.Process(pid), 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, self.process.memory_info().rss)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


@contextmanager
def server(args: argparse.Namespace) -> Iterator[tuple[tk.Client, httpx.Client, int]]:
    folder = Path(tempfile.mkdtemp(prefix="bench-real-model-"))
    env = {"TOOLKIT_TORCH_THREADS": str(args.threads)}
    serve = ["--base-model", args.base_model, "--dtype", args.dtype, "--max-num-seqs", "64"]
    proc, url, key = start_server(folder, env=env, args=serve, log=folder / "server.log", timeout=600)
    try:
        with tk.Client(url, key) as client, httpx.Client(base_url=url, timeout=900) as http:
            http.headers["Authorization"] = f"Bearer {key}"
            yield client, http, proc.pid
    finally:
        proc.terminate()
        proc.wait(60)


def engine_decode(http: httpx.Client, pid: int, concurrency: int, tokens: int) -> tuple[Rate, list[int]]:
    """``concurrency`` concurrent greedy requests of ``tokens`` tokens; the rate and one answer's ids."""
    body = {"messages": MESSAGES, "max_tokens": tokens, "temperature": 0, "ignore_eos": True}
    answers: list[list[int]] = []

    def one() -> None:
        r = http.post("/v1/chat/completions", json={**body, "return_token_ids": True})
        r.raise_for_status()
        answers.append(r.json()["choices"][0]["token_ids"])

    with metered(pid) as rate:
        concurrently([one] * concurrency)
    return rate(sum(map(len, answers))), answers[0]


def generate_decode(model: Any, prompt: list[int], batch: int, tokens: int) -> tuple[Rate, list[int]]:
    ids = torch.tensor([prompt] * batch)
    options = {"do_sample": False, "max_new_tokens": tokens, "min_new_tokens": tokens, "pad_token_id": 0}
    with torch.no_grad(), metered(None) as rate:
        out = model.generate(ids, attention_mask=torch.ones_like(ids), **options)
    return rate(batch * tokens), out[0, len(prompt) :].tolist()


def ttft(http: httpx.Client, model: Any, prompt: list[int], samples: int) -> tuple[float, float]:
    """p50 ms to the first streamed token of one request, and of ``generate`` of one token."""
    engine, peer = [], []
    for _ in range(samples):
        started = time.perf_counter()
        body = {"messages": MESSAGES, "max_tokens": 2, "stream": True}
        with http.stream("POST", "/v1/chat/completions", json=body) as r:
            lines = r.iter_lines()
            for line in lines:
                if '"content":"' in line and '"role"' not in line:
                    engine.append(time.perf_counter() - started)
                    break
            for _ in lines:
                pass
        started = time.perf_counter()
        ids = torch.tensor([prompt])
        with torch.no_grad():
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=1, pad_token_id=0)
        peer.append(time.perf_counter() - started)
    return 1000 * statistics.median(engine), 1000 * statistics.median(peer)


def fastest(measured: tuple[Rate, list[int]]) -> float:
    return measured[0].wall


QUESTIONS = [
    "What is the capital of France?",
    "Name three colors.",
    "What is 12 times 3?",
    "Who wrote Hamlet?",
    "Give me a synonym for happy.",
    "What do bees make?",
    "How many days are in a week?",
    "Translate 'thank you' into Spanish.",
    "What is the boiling point of water in Celsius?",
    "Write a haiku about the sea.",
    "What is the largest planet?",
    "Spell the word 'banana' backwards.",
    "What language is spoken in Brazil?",
    "Name a fruit that is yellow.",
    "What is H2O?",
    "Say hello.",
]


def agreement(http: httpx.Client, model: Any, tokens: int) -> str:
    """How the engine's greedy answers to 16 questions compare with float32 ``generate``'s: the
    answers identical, and their tokens in common from the start, on average."""
    same, before = 0, []
    for question in QUESTIONS:
        body = {"messages": [{"role": "user", "content": question}], "max_tokens": tokens, "temperature": 0}
        answer = http.post("/v1/chat/completions", json={**body, "return_token_ids": True}).json()
        ids = torch.tensor([answer["prompt_token_ids"]])
        with torch.no_grad():
            out = model.generate(
                ids, attention_mask=torch.ones_like(ids), max_new_tokens=tokens, do_sample=False
            )
        peer = out[0, ids.shape[1] :].tolist()
        mine = answer["choices"][0]["token_ids"]
        pairs = list(zip(mine, peer, strict=False))
        before.append(next((i for i, (a, b) in enumerate(pairs) if a != b), len(pairs)))
        same += mine == peer
    return (
        f"{same} of {len(QUESTIONS)} greedy answers identical to float32 `generate`'s; "
        f"{statistics.mean(before):.1f} tokens in common from the start, on average"
    )


def decode_table(args: argparse.Namespace, http: httpx.Client, pid: int) -> tuple[str, str]:
    body = {"messages": MESSAGES, "max_tokens": 1, "return_token_ids": True}
    prompt = http.post("/v1/chat/completions", json=body).json()["prompt_token_ids"]
    torch.set_num_threads(args.threads)
    spec = resolve_base(BaseSource(args.base_model), Path(tempfile.mkdtemp()))
    model = AutoModelForCausalLM.from_pretrained(spec.folder, dtype=torch.float32).eval()
    engine_decode(http, pid, 2, 4)
    rows = []
    for n in args.concurrency:
        engine = max((engine_decode(http, pid, n, args.tokens) for _ in range(args.rounds)), key=fastest)
        peer = max((generate_decode(model, prompt, n, args.tokens) for _ in range(args.rounds)), key=fastest)
        same = sum(a == b for a, b in zip(engine[1], peer[1], strict=False)) / max(len(peer[1]), 1)
        wall, cpu = engine[0].wall / peer[0].wall, engine[0].cpu / peer[0].cpu
        rows.append(
            f"| {n} | {engine[0].wall:.1f} | {peer[0].wall:.1f} | **{wall:.2f}x** | "
            f"{engine[0].cpu:.1f} | {peer[0].cpu:.1f} | {cpu:.2f}x | {same:.0%} |"
        )
        print(rows[-1], flush=True)
    first, peer_first = ttft(http, model, prompt, args.ttft_samples)
    agreed = agreement(http, model, args.tokens)
    header = (
        "| concurrent requests (generate's batch) | engine, tok/s | generate, tok/s | ratio | "
        "engine, tok per CPU-s | generate, tok per CPU-s | ratio | greedy tokens equal |\n" + "|---" * 8 + "|"
    )
    table = header + "\n" + "\n".join(rows) + f"\n\nAnswers to 16 questions: {agreed}."
    return table, f"{first:.0f} ms (generate of one token: {peer_first:.0f} ms)"


def row(name: str, total: float, steps: float, bare: float) -> str:
    return f"| {name} | {total:.2f} | {steps:.2f} | {bare:.2f} | **{total / bare:.2f}x** |"


def training_table(args: argparse.Namespace, client: tk.Client) -> str:
    spec = resolve_base(BaseSource(args.base_model), Path(tempfile.mkdtemp()))
    placement = pick_placement("cpu")
    rows = []
    model = client.models.create(project="bench", name="sft", base_model=args.base_model, lora_config=LORA)
    demos = lookup.TASK.demonstrations(SFT_BATCH * args.sft_batches, seed=0)
    config = {"batch_size": SFT_BATCH, "learning_rate": SFT_LR}

    def sft() -> Any:
        return client.sft_training_jobs.create_from_data(model_id=model.id, data=demos, config=config)

    bare_sft = BareSFT(spec, args.threads, placement, LORA)
    timed = api_job(client, model.id, sft)
    bare = bare_sft.step(bare_sft.batches(demos, SFT_BATCH), SFT_LR)
    rows.append(
        row(
            f"SFT, {args.sft_batches} batches of {SFT_BATCH}",
            timed.total,
            timed.phases["gradient steps"],
            bare,
        )
    )
    del bare_sft

    model = client.models.create(project="bench", name="rl", base_model=args.base_model, lora_config=LORA)
    agent = lookup.TASK.agent(client, tk.research.checkpoint_name(model, 0))
    started = time.perf_counter()
    scenarios = lookup.TASK.scenarios(args.prompts, seed=0)
    groups = agent.gather(scenarios, group_size=args.group_size, max_concurrency=64, progress=False)
    rollout_s = time.perf_counter() - started
    groups = rewarded(groups, seed=1)

    def rl() -> Any:
        return client.training_jobs.create(
            model_id=model.id, trajectory_groups=groups, experimental_config=RL_CONFIG
        )

    settings = resolve(ExperimentalTrainingConfig.model_validate(RL_CONFIG))
    bare_rl = BareRL(spec, settings, args.threads, placement, LORA)
    timed = api_job(client, model.id, rl)
    bare = bare_rl.step(bare_rl.batches(groups, seed=timed.base_step))
    name = f"RL, {args.prompts} x {args.group_size} lookup episodes ({timed.gradient_steps} minibatches)"
    rows.append(row(name, timed.total, timed.phases["gradient steps"], bare))
    whole = rollout_s + timed.total
    header = "| job | through the API, s | of which gradient steps, s | bare peft loop, s | ratio |\n"
    return (
        header
        + "|---" * 5
        + "|\n"
        + "\n".join(rows)
        + f"\n\nOne whole RL step of the recipe: {rollout_s:.1f} s "
        f"of agent rollouts ({len(groups)} groups x {args.group_size} two-turn episodes) and "
        f"{timed.total:.1f} s for the job: **{whole:.1f} s**."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-model", default=MODEL)
    parser.add_argument("--threads", type=int, default=2, help="torch threads, server and this process")
    parser.add_argument("--dtype", default="auto", help="the engine's --dtype (generate stays float32)")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sft-batches", type=int, default=4)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--smoke", action="store_true", help="the smallest sizes, for the test suite")
    args = parser.parse_args()
    args.concurrency, args.ttft_samples = [1, 16, 64], 10
    if args.smoke:
        args.concurrency, args.ttft_samples, args.tokens, args.rounds = [1, 2], 2, 4, 1
        args.sft_batches, args.prompts, args.group_size = 1, 2, 2
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    with server(args) as (client, http, pid):
        peak = PeakMemory(pid)
        decode, first = decode_table(args, http, pid)
        training = training_table(args, client)
        rss = peak.stop()
    print(
        f"""## The real model on the CPU

`.venv/bin/python bench/real_model.py --threads {args.threads} --dtype {args.dtype} --tokens {args.tokens}` on
`{args.base_model}` (load {load} at the start; the server's CPU time measured from /proc). Decode,
greedy, {args.tokens} new tokens a request, the engine over HTTP against `generate` (float32) in the
bench's process:

{decode}

Time to the first token of one streamed request: {first}.

LoRA training (rank {LORA.rank}), from the job's POST to the first token of its checkpoint, against the
bare peft loop on the same minibatches:

{training}

The server's peak resident memory over the run: {rss / 2**30:.2f} GiB."""
    )


if __name__ == "__main__":
    main()
