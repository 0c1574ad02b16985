"""``POST /v1/chat/completions`` over loopback HTTP: each field group with its effect checked."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import httpx

from conftest import LocalServer
from support.chat_helpers import USER, chat, text
from toolkit.server.engine.model import BUILTIN_NAME
from toolkit.types.training import Choice

A, B, C = ord("a"), ord("b"), ord("c")


def test_response_has_vllm_shape_and_usage_adds_up(http: httpx.Client) -> None:
    resp = chat(http, max_tokens=5, ignore_eos=True)
    assert list(resp) == [
        "id",
        "object",
        "created",
        "model",
        "choices",
        "service_tier",
        "system_fingerprint",
        "usage",
        "prompt_logprobs",
        "prompt_token_ids",
        "kv_transfer_params",
    ]
    assert resp["id"].startswith("chatcmpl-") and resp["object"] == "chat.completion"
    assert resp["model"] == BUILTIN_NAME
    choice = resp["choices"][0]
    assert list(choice) == ["index", "message", "logprobs", "finish_reason", "stop_reason", "token_ids"]
    assert list(choice["message"]) == [
        "role",
        "content",
        "refusal",
        "annotations",
        "audio",
        "function_call",
        "reasoning",
    ]
    assert choice["finish_reason"] == "length" and choice["stop_reason"] is None
    usage = resp["usage"]
    assert usage["completion_tokens"] == 5
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    # "<|im_start|>user\nSay something.<|im_end|>\n<|im_start|>assistant\n": 1+5+14+1+1 + 1+10
    assert usage["prompt_tokens"] == 33


def test_request_id_becomes_the_response_id_and_unknown_fields_are_ignored(http: httpx.Client) -> None:
    resp = chat(http, max_tokens=2, request_id="my-req-1", nvext={"x": 1}, vllm_xargs={"a": 1})
    assert resp["id"] == "chatcmpl-my-req-1"


def test_seed_is_reproducible_and_n_gives_distinct_choices(http: httpx.Client) -> None:
    body = {"max_tokens": 12, "n": 3, "seed": 1234, "temperature": 1.0, "ignore_eos": True}
    first, second = chat(http, **body), chat(http, **body)
    assert [c["index"] for c in first["choices"]] == [0, 1, 2]
    assert [text(first, i) for i in range(3)] == [text(second, i) for i in range(3)]
    assert len({text(first, i) for i in range(3)}) > 1
    assert first["usage"]["completion_tokens"] == 36
    other = chat(http, **{**body, "seed": 99})
    assert [text(other, i) for i in range(3)] != [text(first, i) for i in range(3)]


def test_stop_string_stops_and_sets_stop_reason(http: httpx.Client) -> None:
    body = {"max_tokens": 60, "seed": 3, "allowed_token_ids": [A, B], "stop": ["b"]}
    resp = chat(http, **body)
    choice = resp["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["stop_reason"] == "b"
    assert set(text(resp)) <= {"a"}
    kept = chat(http, **body, include_stop_str_in_output=True)
    assert text(kept) == text(resp) + "b"


def test_stop_token_ids_set_an_integer_stop_reason(http: httpx.Client) -> None:
    resp = chat(
        http, max_tokens=60, seed=5, allowed_token_ids=[A, B], stop_token_ids=[B], return_token_ids=True
    )
    choice = resp["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["stop_reason"] == B
    assert choice["token_ids"][-1] == B and "b" not in text(resp)
    assert resp["usage"]["completion_tokens"] == len(choice["token_ids"])


def test_max_completion_tokens_wins_and_min_tokens_holds_eos(http: httpx.Client) -> None:
    resp = chat(http, max_tokens=20, max_completion_tokens=4, ignore_eos=True)
    assert resp["usage"]["completion_tokens"] == 4
    # EOS is the only allowed token besides "a": min_tokens keeps it away for 6 tokens
    held = chat(http, max_tokens=30, min_tokens=6, allowed_token_ids=[A, 257], logit_bias={"257": 50}, seed=1)
    assert held["usage"]["completion_tokens"] == 7
    assert text(held) == "a" * 6 and held["choices"][0]["finish_reason"] == "stop"


def test_allowed_token_ids_logit_bias_and_bad_words(http: httpx.Client) -> None:
    allowed = chat(http, max_tokens=30, seed=2, allowed_token_ids=[A, B, C])
    assert set(text(allowed)) <= {"a", "b", "c"} and text(allowed)
    forced = chat(http, max_tokens=6, temperature=0, logit_bias={str(ord("x")): 100}, ignore_eos=True)
    assert text(forced) == "xxxxxx"
    banned = chat(http, max_tokens=40, seed=4, allowed_token_ids=[A, B, C], bad_words=["b"])
    assert "b" not in text(banned) and len(text(banned)) == 40
    pairs = chat(http, max_tokens=40, seed=4, allowed_token_ids=[A, B], bad_words=["ab"])
    assert "ab" not in text(pairs)


def test_special_tokens_in_the_text_when_not_skipped(http: httpx.Client) -> None:
    body = {"max_tokens": 2, "allowed_token_ids": [257], "ignore_eos": True, "skip_special_tokens": False}
    assert text(chat(http, **body)) == "<|im_end|> <|im_end|>"
    assert text(chat(http, **body, spaces_between_special_tokens=False)) == "<|im_end|><|im_end|>"
    assert text(chat(http, **{**body, "skip_special_tokens": True})) == ""


def test_sampling_filters_at_their_limits_keep_only_the_most_likely_token(http: httpx.Client) -> None:
    greedy = text(chat(http, max_tokens=12, temperature=0, ignore_eos=True))
    body = {"max_tokens": 12, "seed": 3, "temperature": 1.0, "ignore_eos": True}
    for narrow in ({"top_k": 1}, {"top_p": 1e-6}, {"min_p": 1.0}):
        assert text(chat(http, **body, **narrow)) == greedy, narrow
    assert text(chat(http, **body, top_k=20, top_p=0.9, min_p=0.01)) != greedy


def test_penalties_spread_the_tokens(random_http: httpx.Client) -> None:
    http = random_http  # the random model's flat distribution shows the spread
    body = {"max_tokens": 20, "temperature": 0, "allowed_token_ids": [A, B, C], "ignore_eos": True}
    plain = text(chat(http, **body))
    assert len(set(plain)) < len(set(text(chat(http, **body, presence_penalty=2.0)))) == 3
    spread = text(chat(http, **body, frequency_penalty=2.0))
    counts = [spread.count(ch) for ch in "abc"]
    assert len(spread) == 20 and max(counts) - min(counts) <= 2, spread
    greedy = {"max_tokens": 12, "temperature": 0, "ignore_eos": True, "return_token_ids": True}
    repeated = chat(http, **greedy)["choices"][0]["token_ids"]
    penalised = chat(http, **greedy, repetition_penalty=5.0)["choices"][0]["token_ids"]
    assert len(set(repeated)) < len(set(penalised)) == 12


def test_truncate_prompt_tokens_keeps_the_last_tokens(http: httpx.Client) -> None:
    resp = chat(http, max_tokens=1, truncate_prompt_tokens=10, return_token_ids=True)
    full = chat(http, max_tokens=1, return_token_ids=True)
    assert resp["usage"]["prompt_tokens"] == 10
    assert resp["prompt_token_ids"] == full["prompt_token_ids"][-10:]


def test_prefix_cache_is_real_and_scoped_by_salt_and_user(server: LocalServer, http: httpx.Client) -> None:
    salt = uuid.uuid4().hex
    messages = [{"role": "user", "content": "A long shared prefix " * 6 + salt}]
    body = {"messages": messages, "max_tokens": 1, "cache_salt": salt}

    def cached(client: httpx.Client, **extra: Any) -> int:
        r = client.post("/v1/chat/completions", json={**body, **extra})
        assert r.status_code == 200, r.text
        return int(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])

    assert cached(http) == 0
    hit = cached(http)
    assert hit > 0 and hit % 16 == 0
    assert cached(http, cache_salt=salt + "x") == 0
    with server.http(server.new_user_key(f"cache-{salt[:8]}")) as other:
        assert cached(other) == 0


def test_beam_search_returns_n_best_beams(http: httpx.Client) -> None:
    body = {"max_tokens": 5, "n": 2, "use_beam_search": True, "temperature": 0, "return_token_ids": True}
    first, second = chat(http, **body), chat(http, **body)
    beams = [c["token_ids"] for c in first["choices"]]
    assert [c["token_ids"] for c in second["choices"]] == beams
    assert len(beams) == 2 and all(len(b) == 5 for b in beams) and beams[0] != beams[1]
    assert [c["finish_reason"] for c in first["choices"]] == ["length", "length"]
    assert first["usage"]["completion_tokens"] == 10


def test_registered_logits_processors_apply(http: httpx.Client) -> None:
    resp = chat(
        http,
        max_tokens=10,
        seed=1,
        allowed_token_ids=[A, B],
        logits_processors=[{"qualname": "ban_tokens", "kwargs": {"token_ids": [B]}}],
    )
    assert text(resp) == "a" * 10
    ngram = chat(
        http,
        max_tokens=40,
        seed=1,
        allowed_token_ids=list(range(A, A + 6)),
        logits_processors=["no_repeat_ngram"],
    )
    out = text(ngram)
    grams = [out[i : i + 3] for i in range(len(out) - 2)]
    assert set(out) <= set("abcdef") and len(grams) == len(set(grams))


def test_documents_tools_and_template_kwargs_reach_the_template(http: httpx.Client) -> None:
    plain = chat(http, max_tokens=1)
    docs = chat(http, max_tokens=1, documents=[{"title": "T", "text": "body"}])
    tools = chat(
        http,
        max_tokens=1,
        tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
        tool_choice="none",
        chat_template_kwargs={"enable_thinking": False},
        reasoning_effort="low",
    )
    assert docs["usage"]["prompt_tokens"] > plain["usage"]["prompt_tokens"]
    assert tools["usage"]["prompt_tokens"] > plain["usage"]["prompt_tokens"]


def test_usage_is_recorded_per_project_and_model(server: LocalServer) -> None:
    project = f"team/{uuid.uuid4().hex[:8]}"
    with server.http() as http:
        for _ in range(2):
            r = http.post(
                "/v1/chat/completions",
                json={"messages": USER, "max_tokens": 3, "ignore_eos": True},
                headers={"OpenAI-Project": project},
            )
            assert r.status_code == 200
    with server.client(project=project) as client:
        report = client.chat.usage(project)
    [row] = report.data
    assert (row.project, row.model, row.requests, row.completion_tokens) == (project, BUILTIN_NAME, 2, 6)
    assert row.total_tokens == row.prompt_tokens + 6


def test_health_answers_while_decoding(server: LocalServer, http: httpx.Client) -> None:
    """Health answers, and says a sequence is running, while a stream of 1,000 tokens decodes (a few
    seconds): a thread reads the stream meanwhile, and each health read is made before the stream's
    last event has arrived."""
    body = {"messages": USER, "max_tokens": 1000, "ignore_eos": True, "stream": True}
    events: list[str] = []
    with server.http() as client, client.stream("POST", "/v1/chat/completions", json=body) as stream:

        def read() -> None:
            for line in stream.iter_lines():
                if line.startswith("data: "):
                    events.append(line)

        reader = threading.Thread(target=read)
        reader.start()
        deadline = time.monotonic() + 60
        while (r := http.get("/v1/health")).json()["models"][0]["running"] < 1:
            assert time.monotonic() < deadline, r.json()  # a snapshot from before its first step
        for _ in range(3):
            r = http.get("/v1/health")
            assert r.status_code == 200 and r.json()["models"][0]["running"] >= 1, r.json()
            assert "data: [DONE]" not in events  # still decoding when health answered
        reader.join(120)
    assert '"role"' in events[0] and events[-1] == "data: [DONE]"
    assert '"finish_reason":"length"' in events[-2]


# ----------------------------------------------------------------------------- client


def test_client_sync_async_and_trainable_choice(server: LocalServer) -> None:
    with server.client() as client:
        completion = client.chat.completions.create(
            messages=USER, max_tokens=4, logprobs=True, return_token_ids=True, seed=1, ignore_eos=True
        )
    choice = completion.trainable_choice(0)
    assert isinstance(choice, Choice)
    assert choice.token_ids is not None and len(choice.token_ids) == 4
    assert choice.token_ids == completion.choices[0].token_ids
    assert choice.prompt_token_ids == completion.prompt_token_ids and choice.prompt_token_ids
    assert choice.logprobs is not None and choice.logprobs.content is not None
    assert len(choice.logprobs.content) == 4
    assert choice.message.content == completion.choices[0].message.content


async def test_async_client_create(server: LocalServer) -> None:
    async with server.async_client() as client:
        completion = await client.chat.completions.create(
            messages=USER, max_tokens=3, seed=2, temperature=1.0, ignore_eos=True
        )
    with server.client() as client:
        same = client.chat.completions.create(
            messages=USER, max_tokens=3, seed=2, temperature=1.0, ignore_eos=True
        )
    assert completion.usage.completion_tokens == 3
    assert completion.choices[0].message.content == same.choices[0].message.content
