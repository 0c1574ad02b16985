"""Structured outputs over HTTP: regex, JSON schema, choice, grammar, json_object, response_format."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

USER = [{"role": "user", "content": "Answer."}]
SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "color": {"enum": ["red", "green", "blue"]}},
    "required": ["ok", "color"],
    "additionalProperties": False,
}


def contents(http: httpx.Client, n: int = 3, **body: Any) -> list[str]:
    r = http.post(
        "/v1/chat/completions", json={"messages": USER, "n": n, "seed": 7, "max_tokens": 200, **body}
    )
    assert r.status_code == 200, r.text
    choices = r.json()["choices"]
    assert all(c["finish_reason"] == "stop" for c in choices), choices
    return [c["message"]["content"] for c in choices]


def error(http: httpx.Client, **body: Any) -> dict[str, Any]:
    r = http.post("/v1/chat/completions", json={"messages": USER, **body})
    assert r.status_code == 400, r.text
    result: dict[str, Any] = r.json()["error"]
    return result


def test_regex_is_always_matched(http: httpx.Client) -> None:
    pattern = r"[0-9]{3}-[a-z]{2}(!|\?)"
    for out in contents(http, structured_outputs={"regex": pattern}):
        assert re.fullmatch(pattern, out), out


def test_json_schema_is_always_matched(http: httpx.Client) -> None:
    for out in contents(http, structured_outputs={"json": SCHEMA}):
        value = json.loads(out)
        assert set(value) == {"ok", "color"} and isinstance(value["ok"], bool)
        assert value["color"] in ("red", "green", "blue")
    fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA, "strict": True}}
    for out in contents(http, response_format=fmt):
        assert json.loads(out)["color"] in ("red", "green", "blue")


def test_choice_returns_one_of_the_choices(http: httpx.Client) -> None:
    choices = ["yes", "no", "maybe so"]
    outs = contents(http, n=4, structured_outputs={"choice": choices})
    assert set(outs) <= set(choices)


def test_grammar_is_matched(http: httpx.Client) -> None:
    grammar = 'root ::= greeting ", " name "!"\ngreeting ::= "hi" | "hello"\nname ::= [A-Z] [a-z] [a-z]?'
    for out in contents(http, structured_outputs={"grammar": grammar}):
        assert re.fullmatch(r"(hi|hello), [A-Z][a-z][a-z]?!", out), out


def test_json_object_is_a_json_object(random_http: httpx.Client) -> None:
    http = random_http  # the random model closes its objects within max_tokens
    outs = [contents(http, n=1, seed=seed, response_format={"type": "json_object"})[0] for seed in (1, 6)]
    values = [json.loads(out) for out in outs]
    assert all(isinstance(v, dict) for v in values) and any(values), outs


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"structured_outputs": {"regex": "a", "choice": ["a"]}},
            "You can only use one kind of constraints for structured outputs ('json', 'regex' or 'choice').",
        ),
        ({"structured_outputs": {"choice": []}}, "Choice '[]' cannot be an empty list"),
        (
            {"structured_outputs": {}},
            "You must use one kind of structured outputs constraint but none are specified: {}",
        ),
        (
            {"response_format": {"type": "json_schema"}},
            "When response_format type is 'json_schema', the 'json_schema' field must be provided. "
            "(parameter=response_format)",
        ),
    ],
)
def test_bad_constraints_are_rejected(http: httpx.Client, body: dict[str, Any], message: str) -> None:
    assert error(http, **body)["message"] == message


def test_uncompilable_constraints_are_400(http: httpx.Client) -> None:
    assert error(http, structured_outputs={"regex": "(unclosed"})["message"].startswith(
        "Failed to transform regex into a grammar"
    )
    assert (
        "Recursive grammar rule"
        in error(http, structured_outputs={"grammar": 'root ::= "(" root ")" | "x"'})["message"]
    )
