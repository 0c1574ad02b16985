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
from typing import TYPE_CHECKING

import httpx

from support.reliability_support import create_model, rows
from support.training_helpers import choice, long_sft_job, new_model, prompt, scored_answer, served

if TYPE_CHECKING:
    from conftest import LocalServer

WRITERS = 4
ACKS_BEFORE_KILL = 12
RL_GROUPS = 2000


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


def kill_while_running(server: LocalServer, job_id: str) -> None:
    """``kill -9`` the server once ``job_id`` made its first gradient step, restart: the job failed
    with its event, the last of all its events. The job is long by construction (minutes of steps
    after the first), so it cannot end between the read that saw the step and the kill."""
    deadline = time.monotonic() + 120
    with server.client() as client:
        while not any(e.type == "gradient_step" for e in client.training_jobs.events.list(job_id, limit=100)):
            status = client.training_jobs.retrieve(job_id).status
            assert status in ("queued", "running"), f"the job ended ({status}) before the kill"
            assert time.monotonic() < deadline, "the job made no gradient step"
            time.sleep(0.05)
    server.kill()
    server.start()
    assert integrity_ok(server, "toolkit.db")
    with server.client() as client:
        job = client.training_jobs.retrieve(job_id)
        events = list(client.training_jobs.events.list(job_id, limit=100))  # every page
    assert job.status == "failed", job
    assert events[-1].type == "training_failed", events[-1]
    assert [e.type for e in events].count("training_failed") == 1
    assert 1 <= [e.type for e in events].count("gradient_step") < int(events[0].data["num_sequences"])


def check_sft_job(fresh_server: LocalServer) -> None:
    """An SFT job of 3,000 batches of one example (``long_sft_job``)."""
    with fresh_server.client() as client:
        job = long_sft_job(client, new_model(client, "kill").id, seed=17)
    kill_while_running(fresh_server, job.id)


def check_rl_job(fresh_server: LocalServer) -> None:
    """An RL job over 2,000 groups of two answers without logprobs (``tac`` rewarded 1, ``xyz`` 0,
    each 30 times): about 500 gradient steps of 8 packed trajectories."""
    with fresh_server.client() as client:
        model = new_model(client, "kill")
        pair = []
        for answer, reward in (("tac" * 30, 1.0), ("xyz" * 30, 0.0)):
            head, ids, _ = scored_answer(client, served(model, 0), "cat", answer)
            made = choice(head, ids, None, answer)
            pair.append({"messages_and_choices": [*prompt("cat"), made], "reward": reward})
    body = {
        "model_id": model.id,
        "trajectory_groups": [{"trajectories": pair} for _ in range(RL_GROUPS)],
        "experimental_config": {"allow_training_without_logprobs": True},
    }
    with fresh_server.http() as http:
        created = http.post("/v1/preview/training-jobs", json=body)
        assert created.status_code == 200, created.text
    kill_while_running(fresh_server, created.json()["id"])


def test_kill_during_log_and_trace_ingest_loses_no_acknowledged_write(fresh_server: LocalServer) -> None:
    check_log(fresh_server)
    check_trace_ingest(fresh_server)


def test_kill_during_sft_and_rl_jobs_fails_them_with_their_event(fresh_server: LocalServer) -> None:
    check_sft_job(fresh_server)
    check_rl_job(fresh_server)
