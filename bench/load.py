"""Load test of the embedded server on loopback, bounded in requests and time.

Many concurrent clients run the real mix: chat completions (plain and streaming), ``/log``, trace
ingest batches, trace stream queries and training-job event polling. Reports requests/s, p50/p99
latency and errors per kind, checks that every acknowledged write is readable afterwards, and
samples the server's peak RSS.

    .venv/bin/python bench/load.py --clients 16 --requests 800 --seconds 60
    .venv/bin/python bench/load.py --smoke   # 4 clients, 24 requests (the test suite runs it)

The first requests go one to each kind, so even a smoke run exercises every kind.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

import httpx
import psutil
from server_process import start_server

BASE = "toolkit/tiny-chat-1m"
TRACE_BATCH = 10
LOG_GROUP = 4


class Load:
    def __init__(self, http: httpx.AsyncClient, model_id: str, job_id: str) -> None:
        self.http = http
        self.model_id = model_id
        self.job_id = job_id
        self.latency: dict[str, list[float]] = defaultdict(list)
        self.errors: dict[str, int] = defaultdict(int)
        self.logged: list[str] = []
        self.traced: list[str] = []

    async def chat(self) -> None:
        body = {"model": BASE, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
        r = await self.http.post("/v1/chat/completions", json=body)
        r.raise_for_status()

    async def chat_stream(self) -> None:
        body = {
            "model": BASE,
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 8,
            "stream": True,
        }
        async with self.http.stream("POST", "/v1/chat/completions", json=body) as r:
            r.raise_for_status()
            async for line in r.aiter_lines():
                if line == "data: [DONE]":
                    return
        raise RuntimeError("stream ended without [DONE]")

    async def log(self) -> None:
        tag = uuid.uuid4().hex
        trajectories = [{"reward": random.random(), "metadata": {"tag": tag}} for _ in range(LOG_GROUP)]
        body = {"split": "val", "trajectory_groups": [{"trajectories": trajectories}]}
        r = await self.http.post(f"/v1/preview/models/{self.model_id}/log", json=body)
        r.raise_for_status()
        self.logged.append(tag)

    async def ingest(self) -> None:
        trace, now = uuid.uuid4().hex, datetime.now(UTC).isoformat()
        batch = [
            {
                "project_id": "local/load",
                "id": f"{trace}-{i}",
                "trace_id": trace,
                "op_name": "rollout",
                "started_at": now,
                "ended_at": now,
                "inputs": {"i": i},
                "output": {"reward": i},
                "attributes": {},
                "summary": {},
            }
            for i in range(TRACE_BATCH)
        ]
        r = await self.http.post("/traces/v2/local/load/calls/complete", json={"batch": batch})
        r.raise_for_status()
        self.traced.append(trace)

    async def stream_query(self) -> None:
        body = {
            "project_id": "local/load",
            "limit": 50,
            "sort_by": [{"field": "started_at", "direction": "desc"}],
        }
        r = await self.http.post("/traces/calls/stream_query", json=body)
        r.raise_for_status()

    async def poll_events(self) -> None:
        r = await self.http.get(f"/v1/preview/training-jobs/{self.job_id}/events", params={"limit": 100})
        r.raise_for_status()

    async def one(self, kind: str) -> None:
        start = time.perf_counter()
        try:
            await getattr(self, kind)()
        except (httpx.HTTPError, RuntimeError):
            self.errors[kind] += 1
            return
        self.latency[kind].append(time.perf_counter() - start)


KINDS = ["chat", "chat_stream", "log", "ingest", "stream_query", "poll_events"]


async def run(url: str, key: str, clients: int, requests: int, seconds: float) -> tuple[Load, float]:
    limits = httpx.Limits(max_connections=clients)
    async with httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=120, limits=limits
    ) as http:
        model = (
            await http.post(
                "/v1/preview/models", json={"project": "load", "name": "load", "base_model": BASE}
            )
        ).json()
        line = json.dumps(
            {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}
        )
        files = [("files", ("train.jsonl", line.encode()))]
        artifact = (await http.post("/v1/preview/artifacts", data={"project": "load"}, files=files)).json()
        job = await http.post(
            "/v1/preview/sft-training-jobs",
            json={"model_id": model["id"], "training_data_url": artifact["url"]},
        )
        load = Load(http, model["id"], job.json()["id"])
        todo = iter(range(requests))
        deadline = time.monotonic() + seconds

        async def client(seed: int) -> None:
            rng = random.Random(seed)
            for n in todo:
                if time.monotonic() > deadline:
                    return
                await load.one(KINDS[n] if n < len(KINDS) else rng.choice(KINDS))

        start = time.perf_counter()
        await asyncio.gather(*(client(i) for i in range(clients)))
        return load, time.perf_counter() - start


async def verify(url: str, key: str, load: Load) -> dict[str, int]:
    """Count the acknowledged writes that read back (all of them, or the run failed)."""
    async with httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=120
    ) as http:
        logged = (
            await http.get(f"/v1/preview/models/{load.model_id}/trajectories", params={"limit": 1000})
        ).json()
        calls = (await http.post("/traces/calls/stream_query", json={"project_id": "local/load"})).text
    tags = {t["trajectory"]["metadata"]["tag"] for t in logged}
    traces = [json.loads(line)["trace_id"] for line in calls.splitlines()]
    return {
        "log batches acknowledged": len(load.logged),
        "log batches read back": sum(tag in tags for tag in load.logged),
        "trace batches acknowledged": len(load.traced),
        "trace batches read back (all calls)": sum(traces.count(t) == TRACE_BATCH for t in load.traced),
    }


def report(load: Load, elapsed: float, counts: dict[str, int], peak_rss: int, clients: int) -> str:
    total = sum(len(v) for v in load.latency.values()) + sum(load.errors.values())
    lines = [
        f"clients: {clients}, requests: {total}, wall: {elapsed:.1f} s, {total / elapsed:.1f} requests/s,"
        f" errors: {sum(load.errors.values())}, server peak RSS: {peak_rss / 2**20:.0f} MiB",
        "",
        "| kind | ok | errors | p50 ms | p99 ms |",
        "|---|---|---|---|---|",
    ]
    for kind in KINDS:
        times = sorted(load.latency[kind])
        p50 = statistics.median(times) * 1000 if times else float("nan")
        p99 = times[min(len(times) - 1, int(len(times) * 0.99))] * 1000 if times else float("nan")
        lines.append(f"| {kind} | {len(times)} | {load.errors[kind]} | {p50:.0f} | {p99:.0f} |")
    lines += ["", *(f"- {k}: {v}" for k, v in counts.items())]
    return "\n".join(lines)


async def sample_rss(pid: int, stop: asyncio.Event) -> int:
    proc, peak = psutil.Process(pid), 0
    while not stop.is_set():
        peak = max(peak, proc.memory_info().rss)
        await asyncio.sleep(0.1)
    return peak


async def main_async(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="toolkit-load-") as folder:
        proc, url, key = start_server(Path(folder), log=Path(folder) / "server.log", timeout=180)
        try:
            stop = asyncio.Event()
            sampler = asyncio.create_task(sample_rss(proc.pid, stop))
            load, elapsed = await run(url, key, args.clients, args.requests, args.seconds)
            counts = await verify(url, key, load)
            stop.set()
            print(report(load, elapsed, counts, await sampler, args.clients))
        finally:
            proc.terminate()
            proc.wait(30)
    lost = counts["log batches acknowledged"] - counts["log batches read back"]
    lost += counts["trace batches acknowledged"] - counts["trace batches read back (all calls)"]
    return 1 if lost else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=800, help="stop after this many requests")
    parser.add_argument("--seconds", type=float, default=60, help="or after this long")
    parser.add_argument("--smoke", action="store_true", help="4 clients, 24 requests, for CI")
    args = parser.parse_args()
    if args.smoke:
        args.clients, args.requests = 4, 24
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
