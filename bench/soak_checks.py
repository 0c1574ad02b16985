"""The soak's read-back: everything the server acknowledged is there, the job running at a kill
failed with its event, and both databases pass ``PRAGMA integrity_check``."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import httpx
from soak_mix import TRACE_PROJECT, Acked
from soak_server import Server


def read_back(server: Server, acked: Acked, job: str | None) -> tuple[list[str], str]:
    """The problems found (acknowledged trace batches not whole, logged trajectories or checkpoints
    lost, ``job`` neither succeeded nor failed with ``training_failed``), and what became of ``job``."""
    problems = []
    job_note = ""
    with server.http(timeout=300) as http:
        body = {"project_id": TRACE_PROJECT, "columns": ["id", "trace_id", "ended_at"]}
        lines = http.post("/traces/calls/stream_query", json=body).text.splitlines()
        ended: dict[str, int] = {}
        for line in lines:
            call = json.loads(line)
            if call.get("ended_at"):
                ended[call["trace_id"]] = ended.get(call["trace_id"], 0) + 1
        lost = [t for t in acked.trace_batches if ended.get(t) != 10]
        if lost:
            problems.append(f"{len(lost)} acknowledged trace batches not whole, e.g. {lost[0]}")
        for model_id, count in acked.logged.items():
            stored = rows(
                server.data_dir / "toolkit.db",
                "SELECT count(*) FROM trajectories WHERE model_id = ? AND split = 'val'",
                model_id,
            )
            if stored < count:
                problems.append(
                    f"model {model_id}: {stored} logged trajectories stored, {count} acknowledged"
                )
        steps: dict[str, dict[int, bool]] = {}
        for model_id, step in acked.checkpoints:
            if model_id not in steps:
                steps[model_id] = checkpoint_steps(http, model_id)
            folder = server.data_dir / "checkpoints" / model_id / f"step{step}"
            # a job that changed no weight (every group's rewards equal) writes a step without files
            files = (folder / "adapter_model.safetensors").exists() or not steps[model_id].get(step)
            if step not in steps[model_id] or not files:
                problems.append(f"checkpoint {model_id} step {step} lost")
        if job is not None:
            state = http.get(f"/v1/preview/training-jobs/{job}").json()
            events = all_events(http, job)
            last = events[-1] if events else None
            job_note = f"the job running: {state['status']}, last event {last}"
            if state["status"] not in ("failed", "succeeded") or (
                state["status"] == "failed" and last != "training_failed"
            ):
                problems.append(f"job {job} after the kill: {state['status']}, last event {last}")
    return problems, job_note


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
