"""Helpers of the reliability tests: error-shape rules, seeded resources, raw SQLite reads."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path
from typing import Any

import httpx

from toolkit.server.engine.model import BUILTIN_NAME
from toolkit.server.errors import service_of

TRAIN_LINE = b'{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}\n'


def unique(prefix: str = "r") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def error_shape_problem(path: str, status: int, body: Any) -> str | None:
    """Why a 4xx body is not in the shape of the service owning ``path`` (``None`` when it is)."""
    if not 400 <= status < 500:
        return None
    service = service_of(path)
    if not isinstance(body, dict):
        return f"{status} on {path}: body is not a JSON object: {body!r}"
    if service == "chat":
        err = body.get("error")
        if set(body) != {"error"} or not isinstance(err, dict):
            return f"{status} on {path}: expected vLLM's {{'error': {{...}}}}, got {body!r}"
        if not {"message", "type", "param", "code"} <= set(err) or not isinstance(err["message"], str):
            return f"{status} on {path}: error object lacks message/type/param/code: {body!r}"
        return None
    if service == "traces":
        if not isinstance(body.get("reason"), str):
            return f"{status} on {path}: expected Weave's {{'reason': str}}, got {body!r}"
        return None
    detail = body.get("detail")
    if set(body) != {"detail"}:
        return f"{status} on {path}: expected FastAPI's {{'detail': ...}}, got {body!r}"
    if isinstance(detail, str):
        return None
    if isinstance(detail, list) and all(
        isinstance(d, dict) and {"loc", "msg", "type"} <= set(d) for d in detail
    ):
        return None
    return f"{status} on {path}: detail is neither a message nor a list of {{loc, msg, type}}: {body!r}"


def create_model(http: httpx.Client, name: str | None = None) -> dict[str, Any]:
    body = {"project": "rel", "name": name or unique("m"), "base_model": BUILTIN_NAME}
    r = http.post("/v1/preview/models", json=body)
    assert r.status_code == 200, r.text
    model: dict[str, Any] = r.json()
    return model


def upload_artifact(http: httpx.Client, model_id: str | None = None) -> dict[str, Any]:
    data = {"project": "rel", **({"model_id": model_id} if model_id else {})}
    r = http.post("/v1/preview/artifacts", data=data, files=[("files", ("train.jsonl", TRAIN_LINE))])
    assert r.status_code == 200, r.text
    artifact: dict[str, Any] = r.json()
    return artifact


def seed_resources(http: httpx.Client) -> dict[str, str]:
    """Real ids of the caller's resources, by path-parameter name, for the fuzzer to aim at."""
    model = create_model(http)
    artifact = upload_artifact(http, model["id"])
    return {
        "model_id": model["id"],
        "artifact_id": artifact["id"],
        "artifact_url": artifact["url"],
        "entity": model["entity"],
        "project": "rel",
    }


def rows(db: Path, sql: str, *args: object) -> list[sqlite3.Row]:
    """Read a server's SQLite file directly (read-only, after the server is gone or beside it)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()
