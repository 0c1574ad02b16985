"""``kill -9`` during writes and jobs: after a restart every acknowledged write is there, no batch
is half visible, interrupted jobs end failed with their event, and SQLite's integrity check is ok."""

from __future__ import annotations

import itertools
import json
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import httpx
from reliability_support import create_model, rows

if TYPE_CHECKING:
    from conftest import LocalServer

WRITERS = 4
ACKS_BEFORE_KILL = 12


def hammer(server: LocalServer, send: Callable[[httpx.Client, str], httpx.Response]) -> list[str]:
    """``WRITERS`` clients send tagged batches until ``ACKS_BEFORE_KILL`` are acknowledged, then the
    server is killed with requests in flight; returns the acknowledged tags."""
    acked: list[str] = []
    stop = threading.Event()

    def writer() -> None:
        with server.http() as http:
            while not stop.is_set():
                tag = uuid.uuid4().hex
                try:
                    if send(http, tag).status_code == 200:
                        acked.append(tag)
                except httpx.TransportError:
                    return  # the server is gone: this batch was never acknowledged
                if len(acked) >= ACKS_BEFORE_KILL:
                    stop.set()

    with ThreadPoolExecutor(WRITERS) as pool:
        for _ in range(WRITERS):
            pool.submit(writer)
        deadline = time.monotonic() + 120
        while not stop.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)
        server.kill()
        stop.set()
    assert len(acked) >= ACKS_BEFORE_KILL
    return acked


def integrity_ok(server: LocalServer, name: str) -> bool:
    return bool(rows(server.data_dir / name, "PRAGMA integrity_check")[0][0] == "ok")


def check_log(fresh_server: LocalServer) -> None:
    """Tagged ``/log`` batches of 2 groups x 5 trajectories."""
    with fresh_server.http() as http:
        model = create_model(http)

    def send(http: httpx.Client, tag: str) -> httpx.Response:
        group = {"trajectories": [{"reward": i, "metadata": {"batch": tag}} for i in range(5)]}
        body = {"split": "val", "trajectory_groups": [group, group]}
        return http.post(f"/v1/preview/models/{model['id']}/log", json=body)

    acked = hammer(fresh_server, send)
    fresh_server.start()
    assert integrity_ok(fresh_server, "toolkit.db")
    counts: dict[str, int] = {}
    for row in rows(fresh_server.data_dir / "toolkit.db", "SELECT data FROM trajectories"):
        tag = json.loads(row["data"])["metadata"]["batch"]
        counts[tag] = counts.get(tag, 0) + 1
    assert all(counts.get(tag) == 10 for tag in acked), "an acknowledged batch is missing"
    assert set(counts.values()) == {10}, "a batch is partly visible"
    with fresh_server.http() as http:
        listed = http.get(f"/v1/preview/models/{model['id']}/trajectories", params={"limit": 1000}).json()
    assert len(listed) == 10 * len(counts)


def check_trace_ingest(fresh_server: LocalServer) -> None:
    """Trace ingest batches of 20 calls, one trace each, sent in turn to the official batch route
    (``/call/upsert_batch``: a start and an end item per call) and to ``/v2/.../calls/complete``."""
    turns = itertools.count()

    def send(http: httpx.Client, tag: str) -> httpx.Response:
        now = datetime.now(UTC).isoformat()
        calls = [
            {
                "project_id": "local/faults",
                "id": f"{tag}-{i}",
                "trace_id": tag,
                "op_name": "op",
                "started_at": now,
                "ended_at": now,
                "inputs": {"i": i},
                "output": "x" * 200,
                "attributes": {},
                "summary": {},
            }
            for i in range(20)
        ]
        if next(turns) % 2:
            return http.post("/traces/v2/local/faults/calls/complete", json={"batch": calls})
        items = [
            item
            for call in calls
            for item in (
                {"mode": "start", "req": {"start": {k: v for k, v in call.items() if k != "ended_at"}}},
                {
                    "mode": "end",
                    "req": {
                        "end": {k: call[k] for k in ("project_id", "id", "ended_at", "output", "summary")}
                    },
                },
            )
        ]
        return http.post("/traces/call/upsert_batch", json={"batch": items})

    first = send(httpx.Client(base_url=fresh_server.url, headers=auth(fresh_server)), "probe")
    assert first.status_code == 200, first.text
    acked = hammer(fresh_server, send)
    fresh_server.start()
    assert integrity_ok(fresh_server, "traces.db")
    with fresh_server.http() as http:
        lines = http.post("/traces/calls/stream_query", json={"project_id": "local/faults"}).text
    counts: dict[str, int] = {}
    for line in lines.splitlines():
        trace = json.loads(line)["trace_id"]
        counts[trace] = counts.get(trace, 0) + 1
    assert all(counts.get(tag) == 20 for tag in acked), "an acknowledged batch is missing"
    assert set(counts.values()) == {20}, "a batch is partly visible"


def auth(server: LocalServer) -> dict[str, str]:
    return {"Authorization": f"Bearer {server.key}"}


def kill_while_running(server: LocalServer, path: str, body: dict[str, Any]) -> None:
    """Start a job, ``kill -9`` the server while it runs, restart: the job failed with its event."""
    with server.http() as http:
        created = http.post(path, json=body)
        assert created.status_code == 200, created.text
        job_id = created.json()["id"]
        deadline = time.monotonic() + 120
        while http.get(f"/v1/preview/training-jobs/{job_id}").json()["status"] != "running":
            assert time.monotonic() < deadline, "the job never started"
            time.sleep(0.05)
    server.kill()
    server.start()
    assert integrity_ok(server, "toolkit.db")
    with server.http() as http:
        job = http.get(f"/v1/preview/training-jobs/{job_id}").json()
        events = http.get(f"/v1/preview/training-jobs/{job_id}/events", params={"limit": 100}).json()
    assert job["status"] == "failed", job
    assert events["data"][-1]["type"] == "training_failed"


def check_sft_job(fresh_server: LocalServer) -> None:
    """An SFT job over 400 examples, one per step."""
    line = {
        "messages": [{"role": "user", "content": "count"}, {"role": "assistant", "content": "1 2 3" * 20}]
    }
    data = "".join(json.dumps(line) + "\n" for _ in range(400)).encode()
    with fresh_server.http() as http:
        model = create_model(http)
        up = http.post(
            "/v1/preview/artifacts", data={"project": "rel"}, files=[("files", ("train.jsonl", data))]
        )
        assert up.status_code == 200, up.text
    body = {"model_id": model["id"], "training_data_url": up.json()["url"], "config": {"batch_size": 1}}
    kill_while_running(fresh_server, "/v1/preview/sft-training-jobs", body)


def check_rl_job(fresh_server: LocalServer) -> None:
    """An RL job over 64 groups of plain (logprob-free) trajectories."""
    with fresh_server.http() as http:
        model = create_model(http)

    def trajectory(answer: str, reward: float) -> dict[str, Any]:
        messages = [{"role": "user", "content": "reverse cat"}, {"role": "assistant", "content": answer}]
        return {"messages_and_choices": messages, "reward": reward}

    groups = [{"trajectories": [trajectory("tac" * 30, 1.0), trajectory("xyz" * 30, 0.0)]} for _ in range(64)]
    body = {
        "model_id": model["id"],
        "trajectory_groups": groups,
        "experimental_config": {"allow_training_without_logprobs": True},
    }
    kill_while_running(fresh_server, "/v1/preview/training-jobs", body)


def test_kill_during_log_and_trace_ingest_loses_no_acknowledged_write(fresh_server: LocalServer) -> None:
    check_log(fresh_server)
    check_trace_ingest(fresh_server)


def test_kill_during_sft_and_rl_jobs_fails_them_with_their_event(fresh_server: LocalServer) -> None:
    check_sft_job(fresh_server)
    check_rl_job(fresh_server)
