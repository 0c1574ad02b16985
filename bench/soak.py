"""Soak of the embedded server: hours of the real mix at high concurrency, with the server's log kept.

- agent rollouts with a tool (the code-lookup task, ``toolkit.tasks.lookup``: a tool call, then the
  answer) through the sync client's :class:`~toolkit.rollouts.Agent`, on LoRA checkpoints of several
  models (every new checkpoint is an adapter loaded on its first request), their groups logged;
- SFT and RL jobs between the rounds of each model (its next round runs on the new checkpoint);
- trace ingest (batches of calls) all along;
- clients that go away mid-request, streamed and non-streamed.

It reports the chat requests, their p50/p99 latency, the stalls seen (the watchdog's count in
``/v1/health`` and requests slower than ``--slow-seconds`` or timed out on the client's side) and
the server's RSS at the start and the end. ``--kills N`` also ``kill -9``s the server N times at
random moments (during rollouts, a job (held before its commit by the server's test-only
``TOOLKIT_CHECKPOINT_PAUSE_FILE``, so it is still running), an adapter's first load, trace ingest),
restarts it on the
same data folder and port, and checks each time that nothing acknowledged is lost (trace batches,
logged trajectories, checkpoints of succeeded jobs and their files), that the jobs running at the kill
failed with their ``training_failed`` event, and that both databases pass ``PRAGMA integrity_check``;
then the soak goes on. It exits 1 when a check fails.

    .venv/bin/python bench/soak.py --requests 200000 --seconds 3600
    .venv/bin/python bench/soak.py --requests 20000 --kills 20
    .venv/bin/python bench/soak.py --smoke [--kills 2]   # seconds; the test suite runs it
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

import toolkit as tk
from toolkit.client import APIConnectionError, APITimeoutError, InternalServerError
from toolkit.tasks import lookup
from toolkit.types.training import TrajectoryGroup

BASE = "toolkit/tiny-chat-1m"
TRACE_PROJECT = "soak/ingest"
DONE = ("succeeded", "failed", "cancelled")


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


FULL = Size(200_000, 3600, 3, 128, 48, 32, 0.25, 0.5, 10)
SMOKE = Size(400, 240, 2, 16, 16, 8, 0.25, 0.5, 0.5)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Server:
    """``toolkit serve`` on one data folder and port, its output appended to ``server.log``."""

    def __init__(self, data_dir: Path, port: int, args: list[str]) -> None:
        self.data_dir, self.port, self.args = data_dir, port, args
        self.url = f"http://127.0.0.1:{port}"
        self.hold = data_dir / "hold-checkpoint"  # while it exists, a job waits before its commit
        self.proc: subprocess.Popen[bytes] | None = None
        self.key = ""

    def start(self) -> None:
        (self.data_dir / "server.json").unlink(missing_ok=True)
        log = open(self.data_dir / "server.log", "ab")  # noqa: SIM115 (lives as long as the server)
        cmd = [sys.executable, "-m", "toolkit", "serve", "--port", str(self.port)]
        cmd += ["--data-dir", str(self.data_dir), *self.args]
        env = {**os.environ, "TOOLKIT_CHECKPOINT_PAUSE_FILE": str(self.hold)}  # see Soak.killer
        self.proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"server exited {self.proc.returncode}; see {self.data_dir / 'server.log'}"
                )
            try:
                self.key = (self.data_dir / "local.key").read_text().strip()
                json.loads((self.data_dir / "server.json").read_text())
                if self.http().get("/v1/health", timeout=5).status_code == 200:
                    return
            except (OSError, ValueError, httpx.HTTPError):
                pass
            time.sleep(0.2)
        raise TimeoutError("server did not start")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def http(self, timeout: float = 60) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {self.key}"}, timeout=timeout
        )

    def rss(self) -> int:
        assert self.proc is not None
        return int(psutil.Process(self.proc.pid).memory_info().rss)

    def stalls(self) -> int:
        with self.http(10) as http:
            return int(http.get("/v1/health").json().get("stalls") or 0)


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


class Soak:
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
        self.job_running = threading.Event()
        self.new_adapter = threading.Event()  # set as the first request to a new checkpoint goes out
        self.ingesting = threading.Event()
        self.in_rollouts = threading.Event()
        self.stalls_before = 0  # watchdog counts of the earlier server processes
        self.kill_reports: list[str] = []
        self.job_note = ""  # what became of the job running at the latest kill
        self.rounds_after_kill = 0  # whole rounds of rollouts since the latest kill
        self.answered_at_kill = 0
        self.failures: list[str] = []
        self.started = time.monotonic()
        self.rss_start = 0  # after the first round (the base model and the first adapters loaded)

    # ------------------------------------------------------------------ helpers

    def chat_count(self) -> int:
        with self.lock:
            return len(self.stats.latencies) + self.stats.errors + self.stats.abandoned

    def done(self) -> bool:
        """The requests sent or the time spent, and every kill done."""
        reached = (
            self.chat_count() >= self.size.requests or time.monotonic() - self.started > self.size.seconds
        )
        kills = self.args.kills
        kills_done = len(self.kill_reports) >= kills and (not kills or self.rounds_after_kill > 0)
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
        self.running_job = job_id
        while True:
            self.up.wait()
            try:
                with self.server.http() as http:
                    job = http.get(f"/v1/preview/training-jobs/{job_id}").json()
            except httpx.HTTPError:
                time.sleep(0.5)
                continue
            if job["status"] == "running":
                self.job_running.set()
            if job["status"] in DONE:
                break
            time.sleep(0.2)
        self.job_running.clear()
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

    # ------------------------------------------------------------------ kills

    def killer(self, kills: int) -> None:
        moments: list[tuple[str, threading.Event]] = [
            ("rollouts", self.in_rollouts),
            ("job", self.job_running),
            ("adapter load", self.new_adapter),
            ("trace ingest", self.ingesting),
        ]
        share = self.size.seconds / (kills + 1)
        for i in range(kills):
            if self.stop.is_set():
                return
            time.sleep(self.rng.uniform(0.2, 1.0) * min(share, self.args.kill_every))
            what, moment = moments[i % len(moments)]
            if what == "job":  # held before its commit, a job seen running is still running at the kill
                self.server.hold.touch()
            if not moment.wait(120):
                what = "rollouts (waited 120 s for the moment)"
            self.kill_and_check(i + 1, what)

    def kill_and_check(self, n: int, what: str) -> None:
        with contextlib.suppress(httpx.HTTPError):
            self.stalls_before += self.server.stalls()
        running = self.running_job
        self.up.clear()
        self.rounds_after_kill = 0
        self.answered_at_kill = len(self.stats.latencies)
        self.server.kill()
        self.server.hold.unlink(missing_ok=True)
        problems = [
            f"{db}: {r}"
            for db in ("toolkit.db", "traces.db")
            if (r := integrity(self.server.data_dir / db)) != "ok"
        ]
        self.server.start()
        with self.lock:
            traces = list(self.acked.trace_batches)
            logged = dict(self.acked.logged)
            checkpoints = list(self.acked.checkpoints)
        problems += self.check(traces, logged, checkpoints, running)
        self.up.set()
        report = (
            f"kill {n} during {what}: {len(traces)} trace batches, {sum(logged.values())} logged "
            f"trajectories, {len(checkpoints)} checkpoints checked"
            + (f", {self.job_note}" if running else "")
            + (f"; PROBLEMS: {problems}" if problems else ": ok")
        )
        print(report, flush=True)
        self.kill_reports.append(report)
        self.failures += problems

    def check(
        self, traces: list[str], logged: dict[str, int], checkpoints: list[tuple[str, int]], job: str | None
    ) -> list[str]:
        problems = []
        with self.server.http(timeout=300) as http:
            body = {"project_id": TRACE_PROJECT, "columns": ["id", "trace_id", "ended_at"]}
            lines = http.post("/traces/calls/stream_query", json=body).text.splitlines()
            ended: dict[str, int] = {}
            for line in lines:
                call = json.loads(line)
                if call.get("ended_at"):
                    ended[call["trace_id"]] = ended.get(call["trace_id"], 0) + 1
            lost = [t for t in traces if ended.get(t) != 10]
            if lost:
                problems.append(f"{len(lost)} acknowledged trace batches not whole, e.g. {lost[0]}")
            for model_id, count in logged.items():
                stored = rows(
                    self.server.data_dir / "toolkit.db",
                    "SELECT count(*) FROM trajectories WHERE model_id = ? AND split = 'val'",
                    model_id,
                )
                if stored < count:
                    problems.append(
                        f"model {model_id}: {stored} logged trajectories stored, {count} acknowledged"
                    )
            steps: dict[str, dict[int, bool]] = {}
            for model_id, step in checkpoints:
                if model_id not in steps:
                    steps[model_id] = checkpoint_steps(http, model_id)
                folder = self.server.data_dir / "checkpoints" / model_id / f"step{step}"
                # a job that changed no weight (every group's rewards equal) writes a step without files
                files = (folder / "adapter_model.safetensors").exists() or not steps[model_id].get(step)
                if step not in steps[model_id] or not files:
                    problems.append(f"checkpoint {model_id} step {step} lost")
            if job is not None:
                state = http.get(f"/v1/preview/training-jobs/{job}").json()
                events = all_events(http, job)
                last = events[-1] if events else None
                self.job_note = f"the job running: {state['status']}, last event {last}"
                if state["status"] not in ("failed", "succeeded") or (
                    state["status"] == "failed" and last != "training_failed"
                ):
                    problems.append(f"job {job} after the kill: {state['status']}, last event {last}")
        return problems

    # ------------------------------------------------------------------ run

    def run(self) -> None:
        self.setup()
        workers = [
            threading.Thread(target=f, daemon=True) for f in (self.jobs, self.ingest, self.disconnects)
        ]
        for w in workers:
            w.start()
        killer = None
        if self.args.kills:
            killer = threading.Thread(target=self.killer, args=(self.args.kills,), daemon=True)
            killer.start()
        last = time.monotonic()
        roller = threading.Thread(target=self.rollouts, daemon=True)
        roller.start()
        while roller.is_alive():
            roller.join(10)
            if time.monotonic() - last > 60:
                last = time.monotonic()
                print(
                    f"  {self.chat_count()} chat requests, {time.monotonic() - self.started:.0f} s",
                    flush=True,
                )
        self.stop.set()
        for w in [*workers, *([killer] if killer else [])]:
            w.join(300)


def integrity(db: Path) -> str:
    conn = sqlite3.connect(db)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


def rows(db: Path, sql: str, *args: object) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(conn.execute(sql, args).fetchone()[0])
    finally:
        conn.close()


def checkpoint_steps(http: httpx.Client, model_id: str) -> dict[int, bool]:
    """Every checkpoint step of the model, and whether its job changed weights (it has files)."""
    steps: dict[int, bool] = {}
    after = None
    while True:
        params: dict[str, Any] = {"limit": 100, **({"after": after} if after else {})}
        page = http.get(f"/v1/preview/models/{model_id}/checkpoints", params=params).json()
        steps |= {c["step"]: bool(c.get("trained")) for c in page["data"]}
        if not page["has_more"]:
            return steps
        after = page["last_id"]


def all_events(http: httpx.Client, job_id: str) -> list[str]:
    types: list[str] = []
    after = None
    while True:
        params: dict[str, Any] = {"limit": 100, **({"after": after} if after else {})}
        page = http.get(f"/v1/preview/training-jobs/{job_id}/events", params=params).json()
        types += [e["type"] for e in page["data"]]
        if not page["has_more"]:
            return types
        after = page["data"][-1]["id"]


def percentile(values: list[float], q: int) -> float:
    if not values:
        return 0.0
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="a small size (the test suite's)")
    parser.add_argument("--requests", type=int, help="chat requests to send (default 200,000; smoke 400)")
    parser.add_argument("--seconds", type=float, help="stop after this long (default 3600; smoke 240)")
    parser.add_argument("--concurrency", type=int, help="concurrent agent episodes (default 48; smoke 16)")
    parser.add_argument("--kills", type=int, default=0, help="kill -9 the server this many times")
    parser.add_argument("--kill-every", type=float, default=60, help="most seconds between two kills")
    parser.add_argument("--slow-seconds", type=float, default=30, help="a chat request slower is a stall")
    parser.add_argument("--client-timeout", type=float, default=120, help="the client's read timeout")
    parser.add_argument("--rollout-timeout", type=float, default=300, help="the agent's rollout timeout")
    parser.add_argument("--stall-warning-seconds", type=float, default=30, help="the server's watchdog")
    parser.add_argument("--data-dir", type=Path, help="the server's data folder (default: a new one, kept)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    size = SMOKE if args.smoke else FULL
    for name in ("requests", "seconds", "concurrency"):
        if getattr(args, name) is not None:
            setattr(size, name, getattr(args, name))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # so that the server is stopped too
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="toolkit-soak-"))
    data_dir.mkdir(parents=True, exist_ok=True)
    server = Server(data_dir, free_port(), ["--stall-warning-seconds", str(args.stall_warning_seconds)])
    command = " ".join(["bench/soak.py", *sys.argv[1:]])
    print(f"soak: {command}; data and server.log in {data_dir}", flush=True)
    server.start()
    soak = Soak(server, size, args)
    start = time.monotonic()
    try:
        soak.run()
        wall = time.monotonic() - start
        stalls = soak.stalls_before + server.stalls()
        rss_end = server.rss()
        with server.http(timeout=300) as http:
            final = soak.check(
                list(soak.acked.trace_batches), dict(soak.acked.logged), list(soak.acked.checkpoints), None
            )
            health = http.get("/v1/health").status_code
    finally:
        server.stop()
    soak.failures += final
    s = soak.stats
    logged_stalls = (data_dir / "server.log").read_text(errors="replace").count("toolkit.watchdog: stall:")
    n = len(s.latencies) + s.errors + s.abandoned
    print(
        f"chat requests: {n} ({len(s.latencies)} answered, {s.errors} failed, {s.abandoned} abandoned on "
        f"purpose) in {wall:.0f} s, {n / wall:.1f}/s"
    )
    print(
        f"latency of answered requests: p50 {percentile(s.latencies, 50) * 1000:.0f} ms, "
        f"p99 {percentile(s.latencies, 99) * 1000:.0f} ms, max {max(s.latencies, default=0) * 1000:.0f} ms"
    )
    print(
        f"stalls: watchdog {stalls} (warnings in server.log: {logged_stalls}), client-side: "
        f"{s.slow} slower than {args.slow_seconds:g} s, {s.timeouts} timed out"
    )
    print(f"rollouts: {s.rollouts} ({s.failed_rollouts} failed); jobs: {dict(sorted(s.jobs.items()))}")
    print(
        f"acknowledged and read back: {len(soak.acked.trace_batches)} trace batches, "
        f"{sum(soak.acked.logged.values())} logged trajectories, {len(soak.acked.checkpoints)} checkpoints"
    )
    print(
        f"server RSS: start {soak.rss_start / 2**20:.0f} MiB, end {rss_end / 2**20:.0f} MiB; "
        f"health after: {health}"
    )
    print(f"kills: {len(soak.kill_reports)}, failed checks: {len(soak.failures)}")
    if args.kills:
        after = len(s.latencies) - soak.answered_at_kill
        print(f"after the last kill: {soak.rounds_after_kill} whole rounds, {after} answered chat requests")
    for problem in soak.failures:
        print(f"- FAILED: {problem}")
    return 1 if soak.failures or health != 200 else 0


if __name__ == "__main__":
    sys.exit(main())
