"""The soak's mix: the workers that load the server together (agent rollouts with a tool and their
groups logged, SFT and RL jobs, trace ingest, clients that go away), what they count and what the
server acknowledged to them."""

from __future__ import annotations

import argparse
import itertools
import json
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from soak_server import Server

import toolkit as tk
from toolkit.client import APIConnectionError, APITimeoutError, InternalServerError
from toolkit.tasks import lookup
from toolkit.types.training import TrajectoryGroup

BASE = "toolkit/tiny-chat-1m"
TRACE_PROJECT = "soak/ingest"
DONE = ("succeeded", "failed", "cancelled")
JOB_GRACE_S = 120  # how long the soak waits for the running job once it has stopped


@dataclass
class Size:
    requests: int
    seconds: float
    models: int
    episodes: int  # per round of one model (groups of 4)
    concurrency: int
    demonstrations: int  # SFT examples per job
    ingest_every: float  # seconds between two trace batches
    disconnect_every: float  # seconds between two abandoned requests
    job_pause: float  # seconds between two jobs
    memory_every: float  # seconds between two memory samples (soak_memory.py)


FULL = Size(200_000, 3600, 3, 128, 48, 32, 0.25, 0.5, 10, 60)
SMOKE = Size(400, 240, 2, 16, 16, 8, 0.25, 0.5, 0.5, 2)  # samples every 2 s: a smoke can end in 10


@dataclass
class Acked:
    """What the server acknowledged, to find again after each kill."""

    trace_batches: list[str] = field(default_factory=list)
    logged: dict[str, int] = field(default_factory=dict)  # model id -> trajectories logged (split val)
    checkpoints: list[tuple[str, int]] = field(default_factory=list)


@dataclass
class Stats:
    latencies: list[float] = field(default_factory=list)  # seconds, answered chat requests
    errors: int = 0
    timeouts: int = 0
    slow: int = 0  # answered after --slow-seconds
    abandoned: int = 0  # requests whose clients went away on purpose
    rollouts: int = 0
    failed_rollouts: int = 0
    jobs: dict[str, int] = field(default_factory=dict)


class Mix:
    """The workers and what they share: the server's state as they know it (``up``, the latest
    checkpoints, the job running) and the moments a kill can aim at (the events)."""

    def __init__(self, server: Server, size: Size, args: argparse.Namespace) -> None:
        self.server, self.size, self.args = server, size, args
        self.acked = Acked()
        self.stats = Stats()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.up = threading.Event()  # cleared while the server is down (killed, restarting)
        self.up.set()
        self.rng = random.Random(args.seed)
        self.models: list[dict[str, Any]] = []
        self.latest: dict[str, int] = {}  # model id -> latest checkpoint step the soak knows
        self.groups: dict[str, list[TrajectoryGroup]] = {}  # model id -> groups of its latest round
        self.running_job: str | None = None
        self.new_adapter = threading.Event()  # set as the first request to a new checkpoint goes out
        self.ingesting = threading.Event()
        self.in_rollouts = threading.Event()
        self.kills_done = 0  # counted by soak_kills.Killer
        self.rounds_after_kill = 0  # whole rounds of rollouts since the latest kill
        self.started = time.monotonic()
        self.rss_start = 0  # after the first round (the base model and the first adapters loaded)

    # ------------------------------------------------------------------ helpers

    def chat_count(self) -> int:
        with self.lock:
            return len(self.stats.latencies) + self.stats.errors + self.stats.abandoned

    def acknowledged(self) -> Acked:
        """A copy of what the server acknowledged so far."""
        with self.lock:
            a = self.acked
            return Acked(list(a.trace_batches), dict(a.logged), list(a.checkpoints))

    def done(self) -> bool:
        """The requests sent or the time spent, and every kill done."""
        reached = (
            self.chat_count() >= self.size.requests or time.monotonic() - self.started > self.size.seconds
        )
        kills = self.args.kills
        kills_done = self.kills_done >= kills and (not kills or self.rounds_after_kill > 0)
        return self.stop.is_set() or (reached and kills_done)

    def client(self) -> tk.Client:
        client = tk.Client(self.server.url, self.server.key, timeout=self.args.client_timeout, max_retries=0)
        create = client.chat.completions.create

        def timed(**request: Any) -> Any:
            self.up.wait()  # a patient client: no request is sent while the server is known down
            start = time.monotonic()
            try:
                result = create(**request)
            except APITimeoutError:
                with self.lock:
                    self.stats.timeouts += 1
                    self.stats.errors += 1
                raise
            except Exception:
                with self.lock:
                    self.stats.errors += 1
                raise
            elapsed = time.monotonic() - start
            with self.lock:
                self.stats.latencies.append(elapsed)
                self.stats.slow += elapsed > self.args.slow_seconds
            return result

        client.chat.completions.create = timed  # type: ignore[method-assign]
        return client

    def retrying(self, what: Callable[[], Any], tries: int = 600) -> Any:
        """``what()``, retried while the server is down (killed and restarting)."""
        for _ in range(tries):
            self.up.wait()
            try:
                return what()
            except (httpx.TransportError, APIConnectionError, InternalServerError):
                time.sleep(0.5)
        raise RuntimeError("the server did not come back")

    # ------------------------------------------------------------------ workers

    def setup(self) -> None:
        with self.server.http() as http:
            for i in range(self.size.models):
                body = {
                    "project": "soak",
                    "name": f"soak{i}-{uuid.uuid4().hex[:6]}",
                    "base_model": BASE,
                    "lora_config": {"rank": 8, "alpha": 16},
                }
                r = http.post("/v1/preview/models", json=body)
                r.raise_for_status()
                self.models.append(r.json())
                self.latest[r.json()["id"]] = 0

    def rollouts(self) -> None:
        """Rounds of agent episodes on each model's latest checkpoint, each round's groups logged."""
        client = self.client()
        for round_ in itertools.count():
            for model in self.models:
                if self.done():
                    return
                step = self.latest[model["id"]]
                name = f"{model['name']}:step{step}" if step else model["name"]
                scenarios = lookup.scenarios(self.size.episodes // 4, self.args.seed * 1000 + round_)
                agent = lookup.agent(client, name, timeout=self.args.rollout_timeout)
                if step and not self.new_adapter.is_set() and model.get("served_step") != step:
                    self.new_adapter.set()
                model["served_step"] = step
                self.in_rollouts.set()
                try:
                    groups = agent.gather(
                        scenarios, group_size=4, max_concurrency=self.size.concurrency, progress=False
                    )
                except Exception as exc:  # every rollout failed (the server was down)
                    print(f"  round {round_} of {model['name']}: {type(exc).__name__}: {exc}", flush=True)
                    groups = []
                finally:
                    self.in_rollouts.clear()
                    self.new_adapter.clear()
                with self.lock:
                    for g in groups:
                        self.stats.rollouts += len(g.trajectories) + len(g.exceptions)
                        self.stats.failed_rollouts += len(g.exceptions)
                if not self.rss_start and self.up.is_set():
                    self.rss_start = self.server.rss()
                whole = [g for g in groups if len(g.trajectories) >= 2]
                if groups and not any(g.exceptions for g in groups):
                    self.rounds_after_kill += 1
                if whole:
                    self.groups[model["id"]] = whole
                    self.log(model["id"], whole)

    def log(self, model_id: str, groups: list[TrajectoryGroup]) -> None:
        body = {"split": "val", "trajectory_groups": [g.model_dump(mode="json") for g in groups]}

        def send() -> None:
            with self.server.http() as http:
                r = http.post(f"/v1/preview/models/{model_id}/log", json=body)
                r.raise_for_status()
            with self.lock:
                self.acked.logged[model_id] = self.acked.logged.get(model_id, 0) + sum(
                    len(g.trajectories) for g in groups
                )

        try:
            self.retrying(send, tries=20)
        except (RuntimeError, httpx.HTTPStatusError) as exc:
            print(f"  /log not acknowledged: {exc}", flush=True)

    def jobs(self) -> None:
        """One SFT job, then one RL job on its latest groups, per model in turn."""
        for model in itertools.cycle(self.models):
            if self.done():
                return
            for kind in ("sft", "rl"):
                if self.done():
                    return
                try:
                    job_id = self.retrying(lambda: self.start_job(kind, model))  # noqa: B023
                except (RuntimeError, httpx.HTTPStatusError) as exc:
                    print(f"  {kind} job not started: {exc}", flush=True)
                    continue
                if job_id is None:
                    continue
                self.follow(job_id, model)
                self.stop.wait(self.size.job_pause)

    def start_job(self, kind: str, model: dict[str, Any]) -> str | None:
        with self.server.http() as http:
            if kind == "sft":
                data = "".join(
                    json.dumps(d) + "\n"
                    for d in lookup.demonstrations(self.size.demonstrations, self.rng.randrange(10**9))
                )
                up = http.post(
                    "/v1/preview/artifacts",
                    data={"project": "soak", "model_id": model["id"]},
                    files=[("files", ("train.jsonl", data.encode()))],
                )
                up.raise_for_status()
                body: dict[str, Any] = {
                    "model_id": model["id"],
                    "training_data_url": up.json()["url"],
                    "config": {"batch_size": 4},
                }
                r = http.post("/v1/preview/sft-training-jobs", json=body)
            else:
                groups = self.groups.get(model["id"])
                if not groups:
                    return None
                body = {
                    "model_id": model["id"],
                    "trajectory_groups": [g.model_dump(mode="json") for g in groups[:8]],
                }
                r = http.post("/v1/preview/training-jobs", json=body)
            r.raise_for_status()
            job_id: str = r.json()["id"]
            with self.lock:
                self.stats.jobs["started"] = self.stats.jobs.get("started", 0) + 1
            return job_id

    def follow(self, job_id: str, model: dict[str, Any]) -> None:
        """Wait for the job to end; once the soak has stopped, for ``JOB_GRACE_S`` more at most (then
        it counts as ``unfinished``)."""
        self.running_job = job_id
        stopped_at: float | None = None
        job: dict[str, Any] = {}
        while True:
            self.up.wait()
            if self.stop.is_set():
                stopped_at = stopped_at or time.monotonic()
                if time.monotonic() - stopped_at > JOB_GRACE_S:
                    job = {"status": "unfinished"}
                    print(f"  job {job_id} had not ended {JOB_GRACE_S} s after the soak", flush=True)
                    break
            try:
                with self.server.http() as http:
                    job = http.get(f"/v1/preview/training-jobs/{job_id}").json()
            except httpx.HTTPError:
                time.sleep(0.5)
                continue
            if job["status"] in DONE:
                break
            time.sleep(0.2)
        self.running_job = None
        with self.lock:
            self.stats.jobs[job["status"]] = self.stats.jobs.get(job["status"], 0) + 1
        if job["status"] == "succeeded" and job.get("result_step") is not None:
            with self.lock:
                self.acked.checkpoints.append((model["id"], job["result_step"]))
            self.latest[model["id"]] = job["result_step"]

    def ingest(self) -> None:
        """Batches of 10 trace calls (a start and an end item each), one trace id per batch."""
        while not self.done():
            self.up.wait()
            tag = uuid.uuid4().hex
            now = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
            items = []
            for i in range(10):
                call = {"project_id": TRACE_PROJECT, "id": f"{tag}-{i}", "trace_id": tag}
                start = {**call, "op_name": "soak", "started_at": now, "attributes": {}, "inputs": {"i": i}}
                end = {**call, "ended_at": now, "output": "x" * 100, "summary": {}}
                del end["trace_id"]
                items += [{"mode": "start", "req": {"start": start}}, {"mode": "end", "req": {"end": end}}]
            self.ingesting.set()
            try:
                with self.server.http() as http:
                    r = http.post("/traces/call/upsert_batch", json={"batch": items})
                if r.status_code == 200:
                    with self.lock:
                        self.acked.trace_batches.append(tag)
            except httpx.HTTPError:
                time.sleep(0.5)
            finally:
                self.ingesting.clear()
            time.sleep(self.size.ingest_every)

    def disconnects(self) -> None:
        """Requests whose clients go away: non-streamed (a short read timeout) and streamed (after
        the first event), long enough by construction (ignore_eos, 400 tokens) to be running."""
        body = {
            "model": BASE,
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 400,
            "ignore_eos": True,
        }
        for n in itertools.count():
            if self.done():
                return
            self.up.wait()
            try:
                if n % 2:
                    with self.server.http(timeout=self.rng.uniform(0.05, 0.5)) as http:
                        http.post("/v1/chat/completions", json=body)
                else:
                    with (
                        self.server.http() as http,
                        http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r,
                    ):
                        next(r.iter_lines())
            except httpx.HTTPError:
                pass
            with self.lock:
                self.stats.abandoned += 1
            time.sleep(self.size.disconnect_every)
