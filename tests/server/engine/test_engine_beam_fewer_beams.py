"""Beam search with fewer candidates than beams (``allowed_token_ids`` narrower than ``n``): the
request is answered with the beams there are (as vLLM does), instead of waiting forever for the
missing ones (the handler counted ``n`` finished choices, the engine sent fewer: a request that never
ended while the engine sat idle), streamed or not; the engine is free afterwards."""

from __future__ import annotations

import json

from conftest import LocalServer
from support.chat_helpers import USER

A = ord("a")  # the byte tokenizer: a byte's token id is its value
BODY = {"messages": USER, "max_tokens": 3, "n": 3, "use_beam_search": True, "allowed_token_ids": [A]}


def test_one_allowed_token_three_beams_is_one_choice(server: LocalServer) -> None:
    with server.http(timeout=60) as http:
        r = http.post("/v1/chat/completions", json=BODY)
        assert r.status_code == 200, r.text
        choices = r.json()["choices"]
        assert [(c["index"], c["message"]["content"], c["finish_reason"]) for c in choices] == [
            (0, "aaa", "length")
        ]
        assert r.json()["usage"]["completion_tokens"] == 3


def test_streamed_one_allowed_token_three_beams_ends(server: LocalServer) -> None:
    with (
        server.http(timeout=60) as http,
        http.stream("POST", "/v1/chat/completions", json={**BODY, "stream": True}) as r,
    ):
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    finals = [json.loads(line[6:]) for line in lines[:-1]]
    reasons = [(c["index"], c["finish_reason"]) for f in finals for c in f["choices"] if c["finish_reason"]]
    assert reasons == [(0, "length")]


def test_two_allowed_tokens_three_beams_are_two_choices(server: LocalServer) -> None:
    body = {**BODY, "allowed_token_ids": [A, A + 1], "max_tokens": 1}
    with server.http(timeout=60) as http:
        r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    assert sorted(c["message"]["content"] for c in r.json()["choices"]) == ["a", "b"]
