"""Log-probabilities over loopback HTTP, checked against the served model's own forward pass:
per-token ``logprobs`` (``top_logprobs`` are the ``k`` most likely tokens, as OpenAI defines them),
the same in streamed chunks, and ``prompt_logprobs``."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from transformers import PreTrainedModel

from conftest import LocalServer
from support.chat_helpers import USER, chat, next_token_logprobs, text
from toolkit.server.engine.model import RANDOM_NAME, builtin_spec, load_model

AS_IDS = {"return_token_ids": True, "return_tokens_as_token_ids": True}


@pytest.fixture(scope="module")
def server(random_server: LocalServer) -> LocalServer:
    """The random-init model's server: its flat distributions sample outside the top-k often."""
    return random_server


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> PreTrainedModel:
    """The served base model (built from the same seed), loaded here to check log-probabilities."""
    return load_model(builtin_spec(tmp_path_factory.mktemp("base"), RANDOM_NAME))


def token_id(entry: dict[str, Any]) -> int:
    token: str = entry["token"]
    assert token.startswith("token_id:"), token
    return int(token.removeprefix("token_id:"))


def check_against_model(
    model: PreTrainedModel, prompt: list[int], tokens: list[int], entries: list[dict[str, Any]], k: int
) -> int:
    """Each entry is the sampled token with its logprob, and the ``k`` most likely tokens most likely
    first; returns at how many positions the sampled token was not among them."""
    dist = next_token_logprobs(model, prompt + tokens)
    assert len(entries) == len(tokens)
    outside = 0
    for pos, (entry, token) in enumerate(zip(entries, tokens, strict=True)):
        row = dist[len(prompt) + pos - 1]
        values, ids = row.topk(k)
        assert token_id(entry) == token
        assert entry["logprob"] == pytest.approx(float(row[token]), abs=1e-3)
        tops = entry["top_logprobs"]
        assert [token_id(t) for t in tops] == ids.tolist()
        assert [t["logprob"] for t in tops] == pytest.approx(values.tolist(), abs=1e-3)
        outside += token not in ids.tolist()
    return outside


def streamed_entries(http: httpx.Client, body: dict[str, Any]) -> list[dict[str, Any]]:
    with http.stream("POST", "/v1/chat/completions", json={"messages": USER, **body, "stream": True}) as r:
        assert r.status_code == 200
        payloads = [line[len("data: ") :] for line in r.iter_lines() if line.startswith("data: ")]
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    return [e for c in chunks if c["choices"][0]["logprobs"] for e in c["choices"][0]["logprobs"]["content"]]


def test_top_logprobs_are_the_k_most_likely_tokens_not_the_sampled_one_first(
    http: httpx.Client, model: PreTrainedModel
) -> None:
    body = {"max_tokens": 16, "seed": 11, "ignore_eos": True, "logprobs": True, "top_logprobs": 3, **AS_IDS}
    resp = chat(http, **body)
    tokens = resp["choices"][0]["token_ids"]
    assert tokens is not None and len(tokens) == 16
    entries = resp["choices"][0]["logprobs"]["content"]
    outside = check_against_model(model, resp["prompt_token_ids"], tokens, entries, k=3)
    assert outside > 0  # sampled tokens outside the top 3 occurred: the case where the order matters


def test_streamed_logprobs_equal_the_whole_responses(http: httpx.Client, model: PreTrainedModel) -> None:
    body = {"max_tokens": 12, "seed": 5, "ignore_eos": True, "logprobs": True, "top_logprobs": 2, **AS_IDS}
    whole = chat(http, **body)
    entries = streamed_entries(http, body)
    assert entries == whole["choices"][0]["logprobs"]["content"]
    tokens = whole["choices"][0]["token_ids"]
    assert tokens is not None and len(tokens) == 12
    assert check_against_model(model, whole["prompt_token_ids"], tokens, entries, k=2) > 0


def test_greedy_logprobs_text_and_bytes(http: httpx.Client, model: PreTrainedModel) -> None:
    body = {"max_tokens": 6, "temperature": 0, "ignore_eos": True, "logprobs": True, "top_logprobs": 5}
    as_ids = chat(http, **body, **AS_IDS)
    tokens = as_ids["choices"][0]["token_ids"]
    assert tokens is not None and len(tokens) == 6
    entries = as_ids["choices"][0]["logprobs"]["content"]
    assert check_against_model(model, as_ids["prompt_token_ids"], tokens, entries, k=5) == 0
    as_text = chat(http, **body)["choices"][0]["logprobs"]["content"]
    assert [e["logprob"] for e in as_text] == [e["logprob"] for e in entries]
    for entry in as_text:
        assert entry["bytes"] == list(entry["token"].encode())
        assert entry["top_logprobs"][0]["token"] == entry["token"]  # greedy: the sampled token is the top one
    none = chat(http, max_tokens=3, logprobs=True, ignore_eos=True)["choices"][0]["logprobs"]["content"]
    assert len(none) == 3 and all(e["top_logprobs"] == [] for e in none)


def test_prompt_logprobs_hold_the_prompt_token_and_the_k_most_likely(
    http: httpx.Client, model: PreTrainedModel
) -> None:
    resp = chat(http, max_tokens=1, prompt_logprobs=2, return_token_ids=True)
    prompt, prompt_lp = resp["prompt_token_ids"], resp["prompt_logprobs"]
    assert prompt_lp[0] is None and len(prompt_lp) == len(prompt)
    dist = next_token_logprobs(model, prompt)
    for pos, entry in enumerate(prompt_lp[1:]):
        row, token = dist[pos], prompt[pos + 1]
        values, ids = row.topk(2)
        assert set(entry) == {str(token), *map(str, ids.tolist())}
        mine = entry[str(token)]
        assert mine["rank"] == int((row > row[token]).sum()) + 1
        assert mine["logprob"] == pytest.approx(float(row[token]), abs=1e-3)
        for rank, (i, v) in enumerate(zip(ids.tolist(), values.tolist(), strict=True), start=1):
            assert entry[str(i)]["rank"] == rank and entry[str(i)]["logprob"] == pytest.approx(v, abs=1e-3)
    text_of = {prompt[p + 1]: e[str(prompt[p + 1])]["decoded_token"] for p, e in enumerate(prompt_lp[1:])}
    assert text_of[ord("S")] == "S" and text_of[ord("\n")] == "\n"


def test_echo_continues_the_last_message_and_reports_prompt_logprobs(http: httpx.Client) -> None:
    messages = [*USER, {"role": "assistant", "content": "Once"}]
    body = {"add_generation_prompt": False, "continue_final_message": True, "echo": True, "max_tokens": 3}
    echoed = chat(http, messages=messages, **body, logprobs=True, top_logprobs=2, return_token_ids=True)
    assert text(echoed).startswith("Once") and len(text(echoed)) > len("Once")
    prompt_lp = echoed["prompt_logprobs"]
    assert prompt_lp is not None and len(prompt_lp) == len(echoed["prompt_token_ids"])
    assert all(len(entry) in (2, 3) for entry in prompt_lp[1:])


def test_tokens_as_token_ids_in_every_entry(http: httpx.Client) -> None:
    resp = chat(http, max_tokens=3, logprobs=True, top_logprobs=2, ignore_eos=True, **AS_IDS)
    for entry, token in zip(
        resp["choices"][0]["logprobs"]["content"], resp["choices"][0]["token_ids"], strict=True
    ):
        assert token_id(entry) == token and entry["bytes"] == list(entry["token"].encode())
        assert len(entry["top_logprobs"]) == 2 and all(token_id(t) >= 0 for t in entry["top_logprobs"])
