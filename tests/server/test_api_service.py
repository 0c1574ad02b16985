"""Service endpoints and authentication over real HTTP: health, system check, served models, 401s."""

from __future__ import annotations

import base64
import sqlite3
import uuid
from typing import Any

import httpx
import pytest

from support.training_helpers import long_sft_job, new_model, wait_for_event, wait_job

BUILTIN_NAME = "toolkit/tiny-chat-1m"  # the served base models (toolkit.server.engine.model)
RANDOM_NAME = "toolkit/tiny-random-1m"
MAX_MODEL_LEN = 1024

CHECK_KEYS = {"success", "duration_ms", "error"}
MISSING = "4f1c2d3e-5a6b-4c7d-8e9f-0a1b2c3d4e5f"  # fixed: the same test ids on every xdist worker
# Every endpoint of the foundation, each with a body it would accept.
ENDPOINTS: list[tuple[str, str, dict[str, Any]]] = [
    ("GET", "/v1/health", {}),
    ("GET", "/v1/system-check", {}),
    ("GET", "/v1/diagnostics/memory", {}),
    ("GET", "/v1/models", {}),
    ("GET", "/v1/preview/models", {}),
    ("POST", "/v1/preview/models", {"json": {"project": "p", "name": "n", "base_model": BUILTIN_NAME}}),
    ("GET", f"/v1/preview/models/{MISSING}", {}),
    ("DELETE", f"/v1/preview/models/{MISSING}", {}),
    ("GET", f"/v1/preview/models/{MISSING}/checkpoints", {"params": {"limit": 5}}),
    ("DELETE", f"/v1/preview/models/{MISSING}/checkpoints", {"json": {"steps": [1]}}),
    ("POST", f"/v1/preview/models/{MISSING}/log", {"json": {"split": "val", "trajectory_groups": []}}),
    ("GET", f"/v1/preview/models/{MISSING}/trajectories", {}),
    ("GET", "/v1/preview/artifacts", {}),
    ("GET", f"/v1/preview/artifacts/{MISSING}", {}),
    (
        "POST",
        "/v1/preview/artifacts",
        {"data": {"project": "p"}, "files": [("files", ("train.jsonl", b"{}"))]},
    ),
]


def test_health(http: httpx.Client) -> None:
    r = http.get("/v1/health")
    assert r.status_code == 200
    body = r.json()
    assert (body["status"], body["version"]) == ("ok", "0.1.0")
    # both built-in models, the pre-trained default first, on the CPU (memory: tests/server/engine)
    assert [(b["name"], b["source"], b["device"], b["dtype"]) for b in body["models"]] == [
        (BUILTIN_NAME, BUILTIN_NAME, "cpu", "float32"),
        (RANDOM_NAME, RANDOM_NAME, "cpu", "float32"),
    ]


def test_system_check_shape(http: httpx.Client) -> None:
    r = http.get("/v1/system-check")
    assert r.status_code == 200
    body = r.json()
    assert set(body) == {"api", "database", "cpu_queue", "gpu_queue"}
    assert body["api"] is True
    for part in ("database", "cpu_queue", "gpu_queue"):
        assert set(body[part]) == (CHECK_KEYS | {"device"} if part == "gpu_queue" else CHECK_KEYS)
        assert body[part]["success"] is True
        assert body[part]["error"] is None
        assert isinstance(body[part]["duration_ms"], float) and body[part]["duration_ms"] >= 0
    assert body["gpu_queue"]["device"] == "cpu"  # the engine's device (this server runs on CPU)


def test_system_check_counts_a_training_worker_as_alive(server: Any, http: httpx.Client) -> None:
    """While the job worker trains (no ping can be answered), its progress makes it alive. The job
    (3,000 batches) runs for minutes after its first step: it is still running when checked."""
    with server.client() as client:
        job = long_sft_job(client, new_model(client, "busy").id, seed=3)
        try:
            wait_for_event(client, job.id, "gradient_step")
            r = http.get("/v1/system-check")
            assert (r.status_code, r.json()["cpu_queue"]["success"], r.json()["cpu_queue"]["error"]) == (
                200,
                True,
                None,
            )
            assert client.training_jobs.retrieve(job.id).status == "running"
        finally:
            client.training_jobs.cancel(job.id)
            assert wait_job(client, job.id).status == "cancelled"  # off the shared queue before the next test


def test_served_models_list(http: httpx.Client) -> None:
    name = f"served-{uuid.uuid4().hex[:8]}"
    http.post("/v1/preview/models", json={"project": "p", "name": name, "base_model": BUILTIN_NAME})
    r = http.get("/v1/models")
    assert r.status_code == 200
    body = r.json()
    assert set(body) == {"object", "data"}
    assert body["object"] == "list"
    base = body["data"][0]
    assert set(base) == {"id", "object", "created", "owned_by", "root", "parent", "max_model_len"}
    assert {k: v for k, v in base.items() if k != "created"} == {
        "id": BUILTIN_NAME,
        "object": "model",
        "owned_by": "toolkit",
        "root": BUILTIN_NAME,
        "parent": None,
        "max_model_len": MAX_MODEL_LEN,
    }
    assert isinstance(base["created"], int)
    cards = {c["id"]: c for c in body["data"]}
    assert (cards[name]["root"], cards[name]["parent"]) == (BUILTIN_NAME, BUILTIN_NAME)
    assert (cards[f"{name}:step0"]["root"], cards[f"{name}:step0"]["parent"]) == (BUILTIN_NAME, name)


@pytest.mark.parametrize(("method", "path", "kw"), ENDPOINTS)
def test_every_endpoint_needs_a_key(server: Any, method: str, path: str, kw: dict[str, Any]) -> None:
    chat_shape = path == "/v1/models"
    with httpx.Client(base_url=server.url, timeout=30) as anonymous:
        for headers, message in [
            ({}, "Not authenticated"),
            ({"Authorization": "Bearer tk-wrong"}, "Invalid API key"),
            ({"Authorization": f"Bearer {server.key}x"}, "Invalid API key"),
            ({"Authorization": f"Token {server.key}"}, "Not authenticated"),
            ({"Authorization": "Bearer"}, "Not authenticated"),
        ]:
            r = anonymous.request(method, path, headers=headers, **kw)
            assert r.status_code == 401, (method, path, headers)
            assert r.headers["www-authenticate"] == "Bearer"
            if chat_shape:
                assert r.json() == {
                    "error": {"message": message, "type": "AuthenticationError", "param": None, "code": 401}
                }
            else:
                assert r.json() == {"detail": message}


def test_invalid_input_without_a_key_is_401(server: Any) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as anonymous:
        r = anonymous.post("/v1/preview/models", json={"project": 1})
        assert r.status_code == 401
        r = anonymous.get(f"/v1/preview/models/{MISSING}/checkpoints", params={"limit": 0})
        assert r.status_code == 401


def test_basic_auth_and_keys_of_other_users(server: Any) -> None:
    basic = base64.b64encode(f"api:{server.key}".encode()).decode()
    with httpx.Client(base_url=server.url, timeout=30) as client:
        assert client.get("/v1/health", headers={"Authorization": f"Basic {basic}"}).status_code == 200
        bad = base64.b64encode(b"api:nope").decode()
        assert client.get("/v1/health", headers={"Authorization": f"Basic {bad}"}).status_code == 401
        assert client.get("/v1/health", headers={"Authorization": "Basic !!!"}).status_code == 401
        key = server.new_user_key(f"svc-user-{uuid.uuid4().hex[:6]}")
        assert key.startswith("tk-") and key != server.key
        assert client.get("/v1/health", headers={"Authorization": f"Bearer {key}"}).status_code == 200


def test_keys_are_stored_hashed(server: Any) -> None:
    with sqlite3.connect(f"file:{server.data_dir / 'toolkit.db'}?mode=ro", uri=True) as conn:
        stored = [row[0] for row in conn.execute("SELECT key_hash FROM api_keys")]
    assert stored and server.key not in stored
    assert all(len(h) == 64 for h in stored)
    for path in server.data_dir.glob("toolkit.db*"):
        assert server.key.encode() not in path.read_bytes()


def test_unknown_route_is_404_in_the_training_shape(http: httpx.Client) -> None:
    r = http.get("/v1/preview/nothing-here")
    assert (r.status_code, r.json()) == (404, {"detail": "Not Found"})


def test_accelerator_check_runs_on_the_device() -> None:
    """The check does real work on the device: one that cannot compute is a failure that says why."""

    from toolkit.server.service_routes import accelerator_check

    cpu = accelerator_check("cpu")
    assert (cpu.success, cpu.error, cpu.device) == (True, None, "cpu")
    meta = accelerator_check("meta")  # tensors without data: no result to read
    assert (meta.success, meta.device) == (False, "meta")
    assert meta.error is not None and meta.error.startswith("RuntimeError")


def test_services_are_typed_and_never_optional() -> None:
    """Every service a route reaches has its own type: no ``Any``, nothing that may still be None
    (an optional part is optional because a setting turns it off)."""
    import typing

    from toolkit.server.chat.context import ChatContext
    from toolkit.server.state import Services
    from toolkit.server.training.context import TrainingContext

    parts = {cls: typing.get_type_hints(cls) for cls in (Services, ChatContext, TrainingContext)}
    assert {"chat", "training", "traces", "job_worker", "users"} <= set(parts[Services])
    assert {"served", "models", "usage"} <= set(parts[ChatContext])
    assert {"runner", "models", "logs", "artifacts"} <= set(parts[TrainingContext])
    by_setting = {"external"}  # None means a setting is off (no --inference-url), never "not ready yet"
    for hints in parts.values():
        for name, hint in hints.items():
            assert hint is not typing.Any, name
            assert (type(None) in typing.get_args(hint)) == (name in by_setting), name
