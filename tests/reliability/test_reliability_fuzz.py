"""Property-based fuzzing of every operation the running server's OpenAPI lists (schemathesis).

Each operation gets ``FUZZ_EXAMPLES`` generated requests (schemathesis' fuzzing phase, valid and
invalid data, fixed seed; reliability_openapi.py says how bodies are bounded): no 5xx,
2xx bodies match the declared schema, every 4xx is in the owning service's error shape, and the
server is healthy afterwards. ``TOOLKIT_FUZZ_EXAMPLES`` / ``TOOLKIT_FUZZ_SEED`` raise the count or
vary the seed; bench/fuzz.py is the deep run (see docs/reliability.md).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import pytest
from schemathesis import Case

from support.reliability_fuzzing import ADDITIONAL_CHECKS, CHECKS, OPENAPI, aim, fuzz_schema, seed_targets

if TYPE_CHECKING:
    from conftest import LocalServer

FUZZ_EXAMPLES = int(os.environ.get("TOOLKIT_FUZZ_EXAMPLES", "20"))
FUZZ_SEED = int(os.environ.get("TOOLKIT_FUZZ_SEED", "8"))


@pytest.fixture(scope="module")
def fuzz_user(server: LocalServer) -> dict[str, Any]:
    """A user of its own (the fuzzer creates and deletes things) and its real things to aim at."""
    key = server.new_user_key("fuzzer")
    with server.http(key) as http:
        return {"key": key, "ids": seed_targets(http)}


schema = fuzz_schema(FUZZ_EXAMPLES, FUZZ_SEED)


@schema.parametrize()
def test_fuzz_operation(case: Case, server: LocalServer, fuzz_user: dict[str, Any]) -> None:
    """Generated requests (half aimed at real ids of this user): no 5xx, right shapes."""
    aim(case, fuzz_user["ids"])
    case.call_and_validate(
        base_url=server.url,
        headers={"Authorization": f"Bearer {fuzz_user['key']}"},
        checks=CHECKS,
        additional_checks=ADDITIONAL_CHECKS,
        timeout=60,
    )


def test_cost_create_response_is_checked_against_its_schema(
    fuzz_user: dict[str, Any], server: LocalServer
) -> None:
    """A 2xx ``/cost/create`` body passes the response-schema check. Its ``ids`` are ``[cost id, llm
    id]`` pairs; as a tuple (``prefixItems``) schemathesis could not read the schema, which failed the
    fuzz run at 1,000 requests per operation. The wire is Weave's either way."""
    body = {
        "project_id": "fuzzer/costs",
        "costs": {"m": {"prompt_token_cost": 1, "completion_token_cost": 2}},
    }
    with server.http(fuzz_user["key"]) as http:
        response = http.post("/traces/cost/create", json=body)
    assert response.status_code == 200, response.text
    ((cost_id, llm_id),) = response.json()["ids"]
    assert llm_id == "m" and isinstance(cost_id, str)
    schema["/traces/cost/create"]["POST"].validate_response(response)


def test_checkpoint_file_is_declared_as_bytes(fuzz_user: dict[str, Any], server: LocalServer) -> None:
    """A real checkpoint file (the fuzzer aims at one) passes the fuzzer's checks: the route declares
    ``application/octet-stream``, and the error-shape check no longer decodes a 2xx (it failed on
    the weights' bytes at depth)."""
    ids = fuzz_user["ids"]
    path = f"/v1/preview/models/{ids['model_id']}/checkpoints/{ids['step']}/files/{ids['name']}"
    with server.http(fuzz_user["key"]) as http:
        response = http.get(path)
    assert response.status_code == 200 and response.headers["content-type"] == "application/octet-stream"
    operation = schema["/v1/preview/models/{model_id}/checkpoints/{step}/files/{name}"]["GET"]
    case = operation.Case(path_parameters={k: ids[k] for k in ("model_id", "step", "name")})
    case.validate_response(response, checks=CHECKS, additional_checks=ADDITIONAL_CHECKS)


@pytest.mark.parametrize("stream", [False, True])
def test_chat_answers_pass_the_fuzzers_checks(
    fuzz_user: dict[str, Any], server: LocalServer, stream: bool
) -> None:
    """A chat completion, as JSON or streamed as Server-Sent Events, is in a declared media type
    (the stream was undocumented: a check failure once the fuzzer sent valid chat bodies)."""
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": stream}
    case = schema["/v1/chat/completions"]["POST"].Case(body=body)
    response = case.call(base_url=server.url, headers={"Authorization": f"Bearer {fuzz_user['key']}"})
    assert response.status_code == 200
    assert response.headers["content-type"][0].startswith(
        "text/event-stream" if stream else "application/json"
    )
    case.validate_response(response, checks=CHECKS, additional_checks=ADDITIONAL_CHECKS)


def test_healthy_after_fuzzing(server: LocalServer) -> None:
    """The server still answers, its database is intact, and it serves the schema that was fuzzed."""
    with server.http() as http:
        assert http.get("/openapi.json").json()["paths"].keys() == OPENAPI["paths"].keys()
        assert http.get("/v1/health").status_code == 200
        check = http.get("/v1/system-check")
        assert check.status_code == 200, check.text
        assert check.json()["database"]["success"]
