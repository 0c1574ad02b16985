"""Decode throughput of the engine over HTTP against transformers' ``generate``, same model, same prompts.

    .venv/bin/python bench/bench_engine.py [--tokens 128] [--requests 16] [--smoke]

Starts ``toolkit serve`` on a temporary data folder (the built-in model), then measures, greedy with
EOS ignored so every request decodes exactly ``--tokens`` tokens:
- engine over HTTP, one request at a time and 16 concurrent requests (tokens/s, wall clock);
- time to first token of a streamed request with a short prompt (p50 over 20 requests);
- health-check latency while 16 requests decode;
- transformers ``generate`` (KV cache, greedy) in this process at batch 1 and batch 16, on as many torch
  threads as the engine uses (``ENGINE_THREADS``).
Prints a Markdown table with the ratios (the figures for docs/performance.md).
``--smoke``: 4 tokens, 2 requests, 3 samples per median, in seconds (the test suite runs it, so a broken
bench fails CI; its figures mean nothing).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import torch

from toolkit.server.engine.codec import Codec
from toolkit.server.engine.engine import ENGINE_THREADS
from toolkit.server.engine.model import ensure_builtin, load_model
from toolkit.server.engine.template import render_chat

MESSAGES = [{"role": "user", "content": "Write a short story about a robot."}]


def start_server(data_dir: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "toolkit", "serve", "--port", "0", "--data-dir", str(data_dir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            url = json.loads((data_dir / "server.json").read_text())["url"]
            key = (data_dir / "local.key").read_text().strip()
            if httpx.get(f"{url}/v1/health", headers={"Authorization": f"Bearer {key}"}).status_code == 200:
                return proc, url, key
        except (FileNotFoundError, ValueError, KeyError, httpx.HTTPError):
            pass
        time.sleep(0.2)
    proc.kill()
    raise TimeoutError("server did not start")


def engine_throughput(http: httpx.Client, concurrency: int, tokens: int, rounds: int) -> float:
    body = {"messages": MESSAGES, "max_tokens": tokens, "temperature": 0, "ignore_eos": True}
    produced = 0
    lock = threading.Lock()

    def one() -> None:
        nonlocal produced
        r = http.post("/v1/chat/completions", json=body)
        r.raise_for_status()
        with lock:
            produced += r.json()["usage"]["completion_tokens"]

    start = time.perf_counter()
    for _ in range(rounds):
        threads = [threading.Thread(target=one) for _ in range(concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return produced / (time.perf_counter() - start)


def ttft_ms(http: httpx.Client, samples: int) -> float:
    body = {"messages": MESSAGES, "max_tokens": 2, "stream": True}
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        with http.stream("POST", "/v1/chat/completions", json=body) as r:
            lines = r.iter_lines()
            for line in lines:
                if line.startswith("data:") and '"content":"' in line and '"role"' not in line:
                    times.append((time.perf_counter() - start) * 1000)
                    break
            for _ in lines:
                pass
    return statistics.median(times)


def health_while_decoding(http: httpx.Client, url: str, key: str, requests: int, tokens: int) -> float:
    """p50 of health checks while ``requests`` requests decode (at least one check)."""
    busy = threading.Thread(target=engine_throughput, args=(http, requests, tokens, 1))
    busy.start()
    times = []
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as probe:
        time.sleep(0.2)
        while not times or busy.is_alive():
            start = time.perf_counter()
            probe.get("/v1/health").raise_for_status()
            times.append((time.perf_counter() - start) * 1000)
            time.sleep(0.05)
    busy.join()
    return statistics.median(times)


def generate_throughput(model: torch.nn.Module, prompt: list[int], batch: int, tokens: int) -> float:
    ids = torch.tensor([prompt] * batch)
    mask = torch.ones_like(ids)
    kwargs = {"do_sample": False, "max_new_tokens": tokens, "min_new_tokens": tokens, "pad_token_id": 259}
    model.generate(ids, attention_mask=mask, **{**kwargs, "max_new_tokens": 4, "min_new_tokens": 4})
    start = time.perf_counter()
    out = model.generate(ids, attention_mask=mask, **kwargs)
    elapsed = time.perf_counter() - start
    return (out.shape[1] - len(prompt)) * batch / elapsed


def generate_ttft_ms(model: torch.nn.Module, prompt: list[int], samples: int) -> float:
    ids = torch.tensor([prompt])
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        model.generate(
            ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=1, pad_token_id=259
        )
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--smoke", action="store_true", help="4 tokens, 2 requests, 3 samples, for CI")
    args = parser.parse_args()
    if args.smoke:
        args.tokens, args.requests = 4, 2
    samples = 3 if args.smoke else 20
    torch.set_num_threads(ENGINE_THREADS)  # the peer (generate, in this process) on the engine's thread count
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        spec = ensure_builtin(data_dir)
        proc, url, key = start_server(data_dir)
        try:
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=600) as http:
                engine_throughput(http, 1, 8, 1)  # warm-up
                engine_1 = engine_throughput(http, 1, args.tokens, 4)
                engine_n = engine_throughput(http, args.requests, args.tokens, 2)
                ttft = ttft_ms(http, samples)
                health = health_while_decoding(http, url, key, args.requests, args.tokens)
        finally:
            proc.terminate()
            proc.wait(30)
        model = load_model(spec)
        prompt = Codec.from_folder(spec.folder).encode(
            render_chat(
                spec.chat_template, MESSAGES, add_generation_prompt=True, continue_final_message=False
            )
        )
        gen_1 = generate_throughput(model, prompt, 1, args.tokens)
        gen_n = generate_throughput(model, prompt, args.requests, args.tokens)
        gen_ttft = generate_ttft_ms(model, prompt, samples)
    n = args.requests
    rows = [
        ("decode tokens/s, 1 request", f"{engine_1:,.0f}", f"{gen_1:,.0f}", f"{engine_1 / gen_1:.2f}x"),
        (
            f"decode tokens/s, {n} concurrent / batch {n}",
            f"{engine_n:,.0f}",
            f"{gen_n:,.0f}",
            f"{engine_n / gen_n:.2f}x",
        ),
        (
            f"{n} concurrent vs generate at batch 1",
            f"{engine_n:,.0f}",
            f"{gen_1:,.0f}",
            f"{engine_n / gen_1:.2f}x",
        ),
        ("time to first token p50 (ms)", f"{ttft:.1f}", f"{gen_ttft:.1f}", f"{gen_ttft / ttft:.2f}x faster"),
        (f"health check p50 while {n} decode (ms)", f"{health:.1f}", "", ""),
    ]
    print(f"model {spec.name}, prompt {len(prompt)} tokens, {args.tokens} new tokens per request, greedy\n")
    print("| measure | engine over HTTP | transformers generate | ratio |")
    print("|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
