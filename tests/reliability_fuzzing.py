"""What the suite's fuzz test (tests/reliability/test_reliability_fuzz.py) and the deep run
(bench/fuzz.py) share: the schemathesis schema of the app's own OpenAPI, the checks every answer
must pass, and aiming path ids at the fuzzing user's real resources."""

from __future__ import annotations

import random
from typing import Any

import schemathesis
from reliability_openapi import fuzz_document
from reliability_support import error_shape_problem
from schemathesis import Case, CheckContext, Response
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance

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
    try:
        body = response.json()
    except ValueError:
        body = response.text
    problem = error_shape_problem(case.path, response.status_code, body)
    if problem:
        raise AssertionError(problem)
    return None


ADDITIONAL_CHECKS = [error_in_service_shape]


def aim(case: Case, ids: dict[str, str]) -> None:
    """Point about half of the path parameters (never a DELETE's) at the user's real resources, so
    the fuzzer reaches past the 404 of a random id."""
    rng = random.Random(repr(case.path_parameters))
    for name in list(case.path_parameters or {}):
        real = ids.get(name)
        if real and case.method != "DELETE" and rng.random() < 0.5:
            case.path_parameters[name] = real
