"""What the suite's fuzz test (tests/reliability/test_reliability_fuzz.py) and the deep run
(bench/fuzz.py) share: the schemathesis schema of the app's own OpenAPI, the checks every answer
must pass, the real things of the fuzzing user (``seed_targets``) and aiming requests at them."""

from __future__ import annotations

import random
import time
from typing import Any

import httpx
import schemathesis
from schemathesis import Case, CheckContext, Response
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance

from support.reliability_openapi import fuzz_document
from support.reliability_support import error_shape_problem, seed_resources
from toolkit.server.engine.model import BUILTIN_NAMES

OPENAPI = fuzz_document()
CHECKS = [not_a_server_error, response_schema_conformance, content_type_conformance]


def fuzz_schema(examples: int, seed: int) -> Any:
    """The schema to fuzz: ``examples`` generated requests per operation (fuzzing phase only, valid
    and invalid data), reproducible from ``seed``."""
    return schemathesis.openapi.from_dict(
        OPENAPI,
        config=schemathesis.Config.from_dict(
            {
                "seed": seed,
                "suppress-health-check": ["too_slow", "filter_too_much", "data_too_large"],
                "phases": {"coverage": {"enabled": False}, "stateful": {"enabled": False}},
                "generation": {"max-examples": examples, "database": "none"},
            }
        ),
    )


@schemathesis.check
def error_in_service_shape(ctx: CheckContext, response: Response, case: Case) -> bool | None:
    """Every 4xx answers in the shape of the service that owns the path."""
    if not 400 <= response.status_code < 500:
        return None  # a 2xx may be bytes (a checkpoint file): the media-type checks cover it
    try:
        body = response.json()
    except ValueError:
        body = response.text
    problem = error_shape_problem(case.path, response.status_code, body)
    if problem:
        raise AssertionError(problem)
    return None


ADDITIONAL_CHECKS = [error_in_service_shape]


def seed_targets(http: httpx.Client) -> dict[str, Any]:
    """Real things of the caller for the fuzzer to aim at: path ids by parameter name (a model with
    a trained LoRA checkpoint at step 1, its file, a finished SFT job, an artifact, a trace project
    with a call), and for request bodies the served model names (base models and the adapter), the
    base models, the artifact's URL, and logged trajectories with tools and parallel tool calls for
    the research/export reads (``/trajectories``)."""
    ids: dict[str, Any] = seed_resources(http)
    job = http.post(
        "/v1/preview/sft-training-jobs",
        json={"model_id": ids["model_id"], "training_data_url": ids["artifact_url"]},
    )
    assert job.status_code == 200, job.text
    ids["job_id"] = job.json()["id"]
    deadline = time.monotonic() + 300
    while http.get(f"/v1/preview/training-jobs/{ids['job_id']}").json()["status"] != "succeeded":
        assert time.monotonic() < deadline, "the seed SFT job did not finish"
        time.sleep(0.2)
    ids["step"] = "1"
    files = http.get(f"/v1/preview/models/{ids['model_id']}/checkpoints/1/files").json()
    ids["name"] = files["files"][0]["name"]
    logged = http.post(f"/v1/preview/models/{ids['model_id']}/log", json=TOOL_LOG)
    assert logged.status_code == 200, logged.text
    ids["project_id"] = f"{ids['entity']}/{ids['project']}"
    call = {"project_id": ids["project_id"], "op_name": "op", "started_at": "2025-06-01T12:00:00Z"}
    started = http.post("/traces/call/start", json={"start": {**call, "thread_id": "t", "turn_id": "u"}})
    assert started.status_code == 200, started.text
    ids["served"] = [m["id"] for m in http.get("/v1/models").json()["data"]]
    ids["base_model"] = list(BUILTIN_NAMES)
    return ids


TOOL = {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}
CALLS = [
    {"id": f"call_{n}", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}
    for n in range(2)
]
TOOL_TRAJECTORY = {
    "messages_and_choices": [
        {"role": "user", "content": "add"},
        {"role": "assistant", "content": None, "tool_calls": CALLS},
        *({"role": "tool", "tool_call_id": c["id"], "content": "2"} for c in CALLS),
        {"role": "assistant", "content": "2"},
    ],
    "tools": [TOOL],
    "reward": 1.0,
}
TOOL_LOG = {"split": "val", "trajectory_groups": [{"trajectories": [TOOL_TRAJECTORY] * 2}]}
# body fields aimed at real values: (key in ``seed_targets``, how often); a real ``model_id`` in a
# body starts a training job, so it is aimed rarely
BODY_AIMS = {
    "model": ("served", 0.5),
    "base_model": ("base_model", 0.5),
    "training_data_url": ("artifact_url", 0.5),
    "project_id": ("project_id", 0.5),
    "model_id": ("model_id", 0.05),
}


def aim(case: Case, ids: dict[str, Any]) -> None:
    """Point about half of the path parameters (never a DELETE's) and of some body fields (served
    model names, base models, trace projects, a named tool choice) at the user's real things, so the
    fuzzer reaches past the 404 of a random id or name."""
    rng = random.Random(repr(case.path_parameters) + repr(case.body)[:2000])
    for name in list(case.path_parameters or {}):
        real = ids.get(name)
        if real and case.method != "DELETE" and rng.random() < 0.5:
            case.path_parameters[name] = real
    if case.method != "DELETE":
        _aim_body(case.body, ids, rng, depth=0)


def _aim_body(node: Any, ids: dict[str, Any], rng: random.Random, depth: int) -> None:
    if depth > 4:
        return
    if isinstance(node, list):
        for item in node:
            _aim_body(item, ids, rng, depth + 1)
        return
    if not isinstance(node, dict):
        return
    for key, value in list(node.items()):
        target = BODY_AIMS.get(key)
        if target and isinstance(value, str) and target[0] in ids and rng.random() < target[1]:
            real = ids[target[0]]
            node[key] = rng.choice(real) if isinstance(real, list) else real
        else:
            _aim_body(value, ids, rng, depth + 1)
    choice, tools = node.get("tool_choice"), node.get("tools")
    if isinstance(choice, dict) and isinstance(tools, list) and tools and rng.random() < 0.5:
        tool = rng.choice(tools)
        name = tool.get("function", {}).get("name") if isinstance(tool, dict) else None
        if isinstance(choice.get("function"), dict) and isinstance(name, str):
            choice["function"]["name"] = name
