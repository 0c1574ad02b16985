"""Helpers shared by the trace-service tests: a raw HTTP client on ``/traces`` and call builders."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx

T0 = "2025-06-01T12:00:00+00:00"


def traces_http(url: str, key: str, **headers: str) -> httpx.Client:
    return httpx.Client(
        base_url=f"{url}/traces", headers={"Authorization": f"Bearer {key}", **headers}, timeout=60
    )


def new_project() -> str:
    return f"tester/p{uuid.uuid4().hex[:12]}"


def new_id() -> str:
    return str(uuid.uuid4())


def start(project: str, call_id: str, op: str = "op", **fields: Any) -> dict[str, Any]:
    body = {
        "project_id": project,
        "id": call_id,
        "trace_id": fields.pop("trace_id", call_id),
        "op_name": op,
        "started_at": fields.pop("started_at", T0),
        "attributes": fields.pop("attributes", {}),
        "inputs": fields.pop("inputs", {}),
    }
    body.update(fields)
    return body


def end(project: str, call_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "project_id": project,
        "id": call_id,
        "ended_at": fields.pop("ended_at", "2025-06-01T12:00:01+00:00"),
        "summary": fields.pop("summary", {}),
        **fields,
    }


def jsonl(response: httpx.Response) -> list[dict[str, Any]]:
    """Decode a JSON Lines body, insisting on one object per line and no blank lines."""
    text = response.text
    assert text == "" or text.endswith("\n")
    lines = text.split("\n")[:-1] if text else []
    assert all(line.strip() for line in lines), "blank line in JSON Lines"
    return [json.loads(line) for line in lines]


def query(http: httpx.Client, project: str, **body: Any) -> list[dict[str, Any]]:
    r = http.post("/calls/stream_query", json={"project_id": project, **body})
    assert r.status_code == 200, r.text
    return jsonl(r)


def ids(calls: list[dict[str, Any]]) -> list[str]:
    return [c["id"] for c in calls]
