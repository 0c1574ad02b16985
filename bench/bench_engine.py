"""Decode throughput of the engine over HTTP against transformers' ``generate``, same model, same prompts;
group rollouts with and without prefix sharing.

    .venv/bin/python bench/bench_engine.py [--tokens 128] [--requests 16] [--groups 4] [--rounds 3] [--smoke]

Starts two ``toolkit serve`` (the built-in model), the second with ``--no-enable-prefix-caching``,
loads the same weights for ``generate`` in this process, then runs ``--rounds`` interleaved rounds
of every measure (the load of a shared machine moves between measures: each keeps its best round):
- engine over HTTP, one request at a time and 16 concurrent requests, greedy with EOS ignored so
  every request decodes exactly ``--tokens`` tokens;
- time to first token of a streamed request with a short prompt (p50 over 20 requests);
- transformers ``generate`` (KV cache, greedy) at batch 1 and batch 16, and its time to the first
  token, on 1 torch thread and on ``ENGINE_THREADS``, keeping the faster (the engine picks its thread
  count per forward);
- group rollouts: ``--groups`` groups of 8 completions of 32 tokens at T=1 (EOS ignored), each group
  on a 300-token prompt of its own, sent as one request with ``n``=8 and as 8 concurrent requests,
  to both servers, and the prompt tokens the engine ran through the model per group (its
  ``prefilled_tokens`` counter in ``GET /v1/health``);
then the health-check latency while 16 requests decode. Throughputs are given per second of wall
time and per second of CPU time of the process that does the work (the server, or this process for
``generate``): on a machine shared with other work, waiting for a core costs wall time, not CPU time.
Prints the load average and two Markdown tables with the ratios (the figures for docs/performance.md).
``--smoke``: 4 tokens, 2 requests, 3 samples per median, 1 group, 1 round, in seconds (the test suite
runs it, so a broken bench fails CI; its figures mean nothing).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import torch
from server_process import start_server

from toolkit.server.engine.codec import Codec
from toolkit.server.engine.engine import ENGINE_THREADS
from toolkit.server.engine.model import ensure_builtin, load_model
from toolkit.server.engine.template import render_chat

T = TypeVar("T")
MESSAGES = [{"role": "user", "content": "Write a short story about a robot."}]
GROUP_SIZE, GROUP_TOKENS, GROUP_PROMPT_CHARS = 8, 32, 281  # a 300-token chat prompt (byte tokens)
INSTRUCTIONS = "Reverse the word, then explain each step of how you did it, briefly and clearly. "


@dataclass(frozen=True)
class Rate:
    """Tokens per second of wall time and per second of CPU time of the process doing the work."""

    wall: float
    cpu: float


@dataclass(frozen=True)
class Server:
    http: httpx.Client
    pid: int
    url: str
    key: str


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU time of process ``pid`` so far (this process when None; Linux's /proc)."""
    if pid is None:
        times = os.times()
        return times.user + times.system
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def metered(pid: int | None) -> Iterator[Callable[[int], Rate]]:
    """Times the block; yields the function giving the :class:`Rate` of the tokens it produced
    (CPU time: that of process ``pid``, this process when None), to call after the block."""
    wall, cpu = time.perf_counter(), cpu_seconds(pid)
    ends: list[float] = []

    def rate(tokens: int) -> Rate:
        return Rate(tokens / (ends[0] - wall), tokens / max(ends[1] - cpu, 0.01))

    yield rate
    ends += [time.perf_counter(), cpu_seconds(pid)]


@contextlib.contextmanager
def serving(data_dir: Path, *args: str) -> Iterator[Server]:
    """``toolkit serve *args`` on ``data_dir``, warmed up (its weights loaded)."""
    data_dir.mkdir()
    proc, url, key = start_server(data_dir, args=args, timeout=120)
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=600) as http:
            server = Server(http, proc.pid, url, key)
            engine_throughput(server, 1, 8, 1)
            group_rollouts(server, 1, as_n=False)
            yield server
    finally:
        proc.terminate()
        proc.wait(30)


def concurrently(calls: list[Callable[[], None]]) -> None:
    threads = [threading.Thread(target=call) for call in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def engine_throughput(server: Server, concurrency: int, tokens: int, rounds: int, **fields: object) -> Rate:
    """``rounds`` rounds of ``concurrency`` requests of ``tokens`` tokens each, greedy with EOS ignored
    unless ``fields`` (added to each request's body: a model, a temperature, a seed) say otherwise."""
    body = {"messages": MESSAGES, "max_tokens": tokens, "temperature": 0, "ignore_eos": True, **fields}
    produced = 0
    lock = threading.Lock()

    def one() -> None:
        nonlocal produced
        r = server.http.post("/v1/chat/completions", json=body)
        r.raise_for_status()
        with lock:
            produced += r.json()["usage"]["completion_tokens"]

    with metered(server.pid) as rate:
        for _ in range(rounds):
            concurrently([one] * concurrency)
    return rate(produced)


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


def health_while_decoding(server: Server, requests: int, tokens: int) -> float:
    """p50 of health checks while ``requests`` requests decode (at least one check)."""
    busy = threading.Thread(target=engine_throughput, args=(server, requests, tokens, 1))
    busy.start()
    times = []
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.key}"}) as probe:
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


def group_rollouts(server: Server, groups: int, as_n: bool) -> tuple[Rate, float, int]:
    """The completion tokens' rate of ``groups`` group rollouts in a row (one ``n`` request or
    concurrent requests per group), the prompt tokens prefilled per group, and the prompt's length."""
    body = {"max_tokens": GROUP_TOKENS, "temperature": 1.0, "ignore_eos": True}
    produced, prompt_tokens = 0, 0
    lock = threading.Lock()

    def one(messages: list[dict[str, str]], n: int) -> None:
        nonlocal produced, prompt_tokens
        r = server.http.post("/v1/chat/completions", json={**body, "messages": messages, "n": n})
        r.raise_for_status()
        with lock:
            produced += r.json()["usage"]["completion_tokens"]
            prompt_tokens = r.json()["usage"]["prompt_tokens"]

    before = prefilled_tokens(server.http)
    with metered(server.pid) as rate:
        for _ in range(groups):
            messages = group_messages()
            if as_n:
                one(messages, GROUP_SIZE)
            else:
                concurrently([lambda m=messages: one(m, 1)] * GROUP_SIZE)
    return rate(produced), (prefilled_tokens(server.http) - before) / groups, prompt_tokens


def generate_throughput(
    model: torch.nn.Module, prompt: list[int], batch: int, tokens: int, cache: str | None = None
) -> Rate:
    """``generate``'s greedy tokens/s at ``batch``; ``cache="static"``: with a static KV cache, the
    decode step compiled by transformers (torch.compile, CUDA graphs) on CUDA, warmed up (compiled)
    at the same shapes first."""
    ids = torch.tensor([prompt] * batch, device=next(model.parameters()).device)
    mask = torch.ones_like(ids)
    kwargs: dict[str, Any] = {"do_sample": False, "max_new_tokens": tokens, "min_new_tokens": tokens}
    kwargs |= {"pad_token_id": 259} | ({"cache_implementation": cache} if cache else {})
    warm = kwargs if cache else {**kwargs, "max_new_tokens": 4, "min_new_tokens": 4}
    model.generate(ids, attention_mask=mask, **warm)
    with metered(None) as rate:
        out = model.generate(ids, attention_mask=mask, **kwargs)
    return rate((out.shape[1] - len(prompt)) * batch)


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


def on_each_thread_count(measure: Callable[[], T]) -> list[tuple[T, int]]:
    """``measure()`` on 1 torch thread and on ``ENGINE_THREADS``, each with its thread count."""
    results = []
    for threads in sorted({1, ENGINE_THREADS}):
        torch.set_num_threads(threads)
        results.append((measure(), threads))
    return results


def load() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")


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
    ours: dict[int, list[Rate]] = {1: [], n: []}
    peer: dict[int, list[tuple[Rate, int]]] = {1: [], n: []}
    ttfts: list[float] = []
    peer_ttfts: list[tuple[float, int]] = []
    groups: dict[tuple[bool, bool], list[tuple[Rate, float, int]]] = {
        (sharing, as_n): [] for sharing in (True, False) for as_n in (True, False)
    }
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as servers:
        shared = servers.enter_context(serving(Path(tmp) / "sharing"))
        plain = servers.enter_context(serving(Path(tmp) / "plain", "--no-enable-prefix-caching"))
        spec = ensure_builtin(Path(tmp) / "sharing")
        model = load_model(spec)
        prompt = Codec.from_folder(spec.folder).encode(
            render_chat(
                spec.chat_template, MESSAGES, add_generation_prompt=True, continue_final_message=False
            )
        )
        for _ in range(args.rounds):  # interleaved, each measure keeps its best round
            for batch in (1, n):
                ours[batch].append(engine_throughput(shared, batch, args.tokens, 2 if batch == 1 else 1))
                peer[batch] += on_each_thread_count(
                    lambda b=batch: generate_throughput(model, prompt, b, args.tokens)
                )
            ttfts.append(ttft_ms(shared.http, samples))
            peer_ttfts += on_each_thread_count(lambda: generate_ttft_ms(model, prompt, samples))
            for as_n in (True, False):
                for sharing, server in ((True, shared), (False, plain)):
                    groups[sharing, as_n].append(group_rollouts(server, args.groups, as_n))
        health = health_while_decoding(shared, n, args.tokens)
    rows = []
    for unit, pick in (("tokens/s", lambda r: r.wall), ("tokens per CPU-second", lambda r: r.cpu)):
        best = {batch: max(pick(r) for r in rates) for batch, rates in ours.items()}
        best_peer = {batch: max((pick(r), t) for r, t in rates) for batch, rates in peer.items()}
        for label, batch, against in (
            ("1 request", 1, 1),
            (f"{n} concurrent / batch {n}", n, n),
            (f"{n} concurrent vs generate at batch 1", n, 1),
        ):
            theirs, threads = best_peer[against]
            ratio = f"{best[batch] / theirs:.2f}x"
            rows.append(
                (f"decode {unit}, {label}", f"{best[batch]:,.0f}", f"{theirs:,.0f} ({threads}t)", ratio)
            )
    ttft, (gen_ttft, threads_ttft) = min(ttfts), min(peer_ttfts)
    rows += [
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
    table(("measure", "engine over HTTP", "transformers generate (threads)", "ratio"), rows)
    group_rows = []
    for as_n, label in ((True, f"`n`={GROUP_SIZE}"), (False, f"{GROUP_SIZE} concurrent requests")):
        for unit, pick in (("tokens/s", lambda r: r.wall), ("tokens per CPU-second", lambda r: r.cpu)):
            with_sharing = max(pick(r[0]) for r in groups[True, as_n])
            without = max(pick(r[0]) for r in groups[False, as_n])
            ratio = f"{with_sharing / without:.2f}x"
            group_rows.append(
                (f"{label}, completion {unit}", f"{with_sharing:,.0f}", f"{without:,.0f}", ratio)
            )
        fill = statistics.mean(r[1] for r in groups[True, as_n])
        plain_fill = statistics.mean(r[1] for r in groups[False, as_n])
        ratio = f"{plain_fill / max(fill, 1):.2f}x fewer"
        group_rows.append(
            (f"{label}, prompt tokens prefilled per group", f"{fill:,.0f}", f"{plain_fill:,.0f}", ratio)
        )
    prompt_len = groups[True, True][0][2]
    print(
        f"\ngroup rollouts: {args.groups} groups of {GROUP_SIZE} x {GROUP_TOKENS} tokens at T=1 per round, "
        f"a {prompt_len}-token prompt per group\n"
    )
    table(("group rollout", "prefix sharing", "no prefix sharing", "ratio"), group_rows)


if __name__ == "__main__":
    main()
