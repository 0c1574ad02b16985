"""Decode throughput of the engine over HTTP against transformers' ``generate``, same model, same prompts;
group rollouts with and without prefix sharing.

    .venv/bin/python bench/bench_engine.py [--tokens 128] [--requests 16] [--groups 4] [--rounds 3] [--smoke]

Starts two ``toolkit serve`` (the built-in model), the second with ``--no-enable-prefix-caching``,
loads the same weights for ``generate`` in this process, then runs ``--rounds`` interleaved rounds
of every measure (the load of a shared machine moves between measures: each keeps its best round):
- engine over HTTP, one request at a time and 16 concurrent requests, greedy with EOS ignored so
  every request decodes exactly ``--tokens`` tokens (tokens/s, wall clock);
- time to first token of a streamed request with a short prompt (p50 over 20 requests);
- transformers ``generate`` (KV cache, greedy) at batch 1 and batch 16, and its time to the first
  token, on 1 torch thread and on ``ENGINE_THREADS``, keeping the faster (the engine picks its thread
  count per forward);
- group rollouts: ``--groups`` groups of 8 completions of 32 tokens at T=1 (EOS ignored), each group
  on a 300-token prompt of its own, sent as one request with ``n``=8 and as 8 concurrent requests,
  to both servers: completion tokens/s, and the prompt tokens the engine ran through the model per
  group (its ``prefilled_tokens`` counter in ``GET /v1/health``);
then the health-check latency while 16 requests decode.
Prints the load average and two Markdown tables with the ratios (the figures for docs/performance.md).
``--smoke``: 4 tokens, 2 requests, 3 samples per median, 1 group, 1 round, in seconds (the test suite
runs it, so a broken bench fails CI; its figures mean nothing).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import torch

from toolkit.server.engine.codec import Codec
from toolkit.server.engine.engine import ENGINE_THREADS
from toolkit.server.engine.model import ensure_builtin, load_model
from toolkit.server.engine.template import render_chat

MESSAGES = [{"role": "user", "content": "Write a short story about a robot."}]
GROUP_SIZE, GROUP_TOKENS, GROUP_PROMPT_CHARS = 8, 32, 281  # a 300-token chat prompt (byte tokens)
INSTRUCTIONS = "Reverse the word, then explain each step of how you did it, briefly and clearly. "


def start_server(data_dir: Path, *args: str) -> tuple[subprocess.Popen[bytes], str, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "toolkit", "serve", "--port", "0", "--data-dir", str(data_dir), *args],
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


def prefilled_tokens(http: httpx.Client) -> int:
    """The engine's count of prompt tokens run through the model since it started."""
    r = http.get("/v1/health")
    r.raise_for_status()
    return int(r.json()["models"][0]["prefilled_tokens"])


def group_messages() -> list[dict[str, str]]:
    """A prompt no earlier request shares (its first block differs), ``GROUP_PROMPT_CHARS`` long."""
    text = f"Group {uuid.uuid4().hex}. " + INSTRUCTIONS * 4
    return [{"role": "user", "content": text[:GROUP_PROMPT_CHARS]}]


def group_rollouts(http: httpx.Client, groups: int, as_n: bool) -> tuple[float, float, int]:
    """Completion tokens/s of ``groups`` group rollouts in a row (one ``n`` request or concurrent
    requests per group), the prompt tokens prefilled per group, and the prompt's length."""
    body = {"max_tokens": GROUP_TOKENS, "temperature": 1.0, "ignore_eos": True}
    produced, prompt_tokens = 0, 0
    lock = threading.Lock()

    def one(messages: list[dict[str, str]], n: int) -> None:
        nonlocal produced, prompt_tokens
        r = http.post("/v1/chat/completions", json={**body, "messages": messages, "n": n})
        r.raise_for_status()
        with lock:
            produced += r.json()["usage"]["completion_tokens"]
            prompt_tokens = r.json()["usage"]["prompt_tokens"]

    before = prefilled_tokens(http)
    start = time.perf_counter()
    for _ in range(groups):
        messages = group_messages()
        if as_n:
            one(messages, GROUP_SIZE)
            continue
        threads = [threading.Thread(target=one, args=(messages, 1)) for _ in range(GROUP_SIZE)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    elapsed = time.perf_counter() - start
    return produced / elapsed, (prefilled_tokens(http) - before) / groups, prompt_tokens


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


def on_each_thread_count(measure: Callable[[], float]) -> list[tuple[float, int]]:
    """``measure()`` on 1 torch thread and on ``ENGINE_THREADS``, each with its thread count."""
    results = []
    for threads in sorted({1, ENGINE_THREADS}):
        torch.set_num_threads(threads)
        results.append((measure(), threads))
    return results


@contextlib.contextmanager
def serving(data_dir: Path, *args: str) -> Iterator[tuple[httpx.Client, str, str]]:
    """``toolkit serve *args`` on ``data_dir``, its weights loaded, and a client of it."""
    data_dir.mkdir()
    proc, url, key = start_server(data_dir, *args)
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=600) as http:
            engine_throughput(http, 1, 8, 1)  # warm-up
            group_rollouts(http, 1, as_n=False)
            yield http, url, key
    finally:
        proc.terminate()
        proc.wait(30)


def load() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--groups", type=int, default=4, help="group rollouts per round and case")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="4 tokens, 2 requests, 1 group, 1 round, for CI")
    args = parser.parse_args()
    if args.smoke:
        args.tokens, args.requests, args.groups, args.rounds = 4, 2, 1, 1
    samples = 3 if args.smoke else 20
    n = args.requests
    load_start = load()
    ours: dict[str, list[float]] = {"1": [], "n": [], "ttft": []}
    peer: dict[str, list[tuple[float, int]]] = {"1": [], "n": [], "ttft": []}
    groups: dict[tuple[bool, bool], list[tuple[float, float, int]]] = {
        (sharing, as_n): [] for sharing in (True, False) for as_n in (True, False)
    }
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as servers:
        http, url, key = servers.enter_context(serving(Path(tmp) / "sharing"))
        plain, _, _ = servers.enter_context(serving(Path(tmp) / "plain", "--no-enable-prefix-caching"))
        spec = ensure_builtin(Path(tmp) / "sharing")
        model = load_model(spec)
        prompt = Codec.from_folder(spec.folder).encode(
            render_chat(
                spec.chat_template, MESSAGES, add_generation_prompt=True, continue_final_message=False
            )
        )
        for _ in range(args.rounds):  # interleaved, each measure keeps its best round
            ours["1"].append(engine_throughput(http, 1, args.tokens, 2))
            peer["1"] += on_each_thread_count(lambda: generate_throughput(model, prompt, 1, args.tokens))
            ours["n"].append(engine_throughput(http, n, args.tokens, 1))
            peer["n"] += on_each_thread_count(lambda: generate_throughput(model, prompt, n, args.tokens))
            ours["ttft"].append(ttft_ms(http, samples))
            peer["ttft"] += on_each_thread_count(lambda: generate_ttft_ms(model, prompt, samples))
            for as_n in (True, False):
                for sharing, client in ((True, http), (False, plain)):
                    groups[sharing, as_n].append(group_rollouts(client, args.groups, as_n))
        health = health_while_decoding(http, url, key, n, args.tokens)
    engine_1, engine_n, ttft = max(ours["1"]), max(ours["n"]), min(ours["ttft"])
    (gen_1, threads_1), (gen_n, threads_n) = max(peer["1"]), max(peer["n"])
    gen_ttft, threads_ttft = min(peer["ttft"])
    n = args.requests
    rows = [
        (
            "decode tokens/s, 1 request",
            f"{engine_1:,.0f}",
            f"{gen_1:,.0f} ({threads_1}t)",
            f"{engine_1 / gen_1:.2f}x",
        ),
        (
            f"decode tokens/s, {n} concurrent / batch {n}",
            f"{engine_n:,.0f}",
            f"{gen_n:,.0f} ({threads_n}t)",
            f"{engine_n / gen_n:.2f}x",
        ),
        (
            f"{n} concurrent vs generate at batch 1",
            f"{engine_n:,.0f}",
            f"{gen_1:,.0f} ({threads_1}t)",
            f"{engine_n / gen_1:.2f}x",
        ),
        (
            "time to first token p50 (ms)",
            f"{ttft:.1f}",
            f"{gen_ttft:.1f} ({threads_ttft}t)",
            f"{gen_ttft / ttft:.2f}x faster",
        ),
        (f"health check p50 while {n} decode (ms)", f"{health:.1f}", "", ""),
    ]
    print(
        f"load average {load_start} at the start, {load()} at the end; "
        f"best of {args.rounds} interleaved rounds"
    )
    print(f"model {spec.name}, prompt {len(prompt)} tokens, {args.tokens} new tokens per request, greedy\n")
    print("| measure | engine over HTTP | transformers generate (threads) | ratio |")
    print("|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    prompt_len = groups[True, True][0][2]
    print(
        f"\ngroup rollouts: {args.groups} groups of {GROUP_SIZE} x {GROUP_TOKENS} tokens at T=1 per round, "
        f"a {prompt_len}-token prompt per group\n"
    )
    print("| group rollout | prefix sharing | no prefix sharing | ratio |")
    print("|---|---|---|---|")
    for as_n, label in ((True, f"`n`={GROUP_SIZE}"), (False, f"{GROUP_SIZE} concurrent requests")):
        shared, plain = max(r[0] for r in groups[True, as_n]), max(r[0] for r in groups[False, as_n])
        shared_fill = statistics.mean(r[1] for r in groups[True, as_n])
        plain_fill = statistics.mean(r[1] for r in groups[False, as_n])
        print(f"| {label}, completion tokens/s | {shared:,.0f} | {plain:,.0f} | {shared / plain:.2f}x |")
        print(
            f"| {label}, prompt tokens prefilled per group | {shared_fill:,.0f} | {plain_fill:,.0f} "
            f"| {plain_fill / max(shared_fill, 1):.2f}x fewer |"
        )


if __name__ == "__main__":
    main()
