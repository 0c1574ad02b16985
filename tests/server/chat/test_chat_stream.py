"""Streaming chat completions: SSE framing, chunk shapes, usage options, equality with non-streamed."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from conftest import LocalServer
from toolkit.client import APIError
from toolkit.server.chat.errors import EngineError
from toolkit.server.chat.routes import sse_events
from toolkit.types.chat import ChatCompletionChunk

USER = [{"role": "user", "content": "Tell me a story."}]


def events(http: httpx.Client, **body: Any) -> list[Any]:
    """The decoded ``data:`` payloads of a stream (``[DONE]`` kept as a string)."""
    with http.stream("POST", "/v1/chat/completions", json={"messages": USER, "stream": True, **body}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"] == "text/event-stream; charset=utf-8"
        raw = r.read().decode()
    assert raw.endswith("data: [DONE]\n\n")
    out: list[Any] = []
    for block in raw.split("\n\n")[:-1]:
        assert block.startswith("data: ")
        payload = block[len("data: ") :]
        out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def streamed_text(chunks: list[Any], index: int = 0) -> str:
    return "".join(
        c["choices"][0]["delta"].get("content") or ""
        for c in chunks
        if isinstance(c, dict) and c.get("choices") and c["choices"][0]["index"] == index
    )


def test_chunk_sequence_has_vllm_shapes(http: httpx.Client) -> None:
    chunks = events(http, max_tokens=3, ignore_eos=True)
    assert chunks[-1] == "[DONE]"
    first, *content, last = chunks[:-1]
    assert first["choices"] == [
        {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
    ]
    assert list(first) == ["id", "object", "created", "model", "choices", "prompt_token_ids"]
    assert first["object"] == "chat.completion.chunk"
    for chunk in content:
        assert list(chunk) == ["id", "object", "created", "model", "choices"]
        assert list(chunk["choices"][0]) == ["index", "delta", "logprobs", "finish_reason", "token_ids"]
    assert last["choices"][0]["finish_reason"] == "length" and "stop_reason" in last["choices"][0]
    assert last["system_fingerprint"]
    assert len({c["id"] for c in chunks[:-1]}) == 1 and len({c["created"] for c in chunks[:-1]}) == 1


def test_streamed_text_equals_non_streamed_for_the_same_seed(http: httpx.Client) -> None:
    body = {"max_tokens": 40, "seed": 21, "n": 2, "temperature": 1.0}
    whole = http.post("/v1/chat/completions", json={"messages": USER, **body}).json()
    chunks = events(http, **body)
    for i in range(2):
        assert streamed_text(chunks, i) == whole["choices"][i]["message"]["content"]
    stops = {"max_tokens": 60, "seed": 2, "allowed_token_ids": [97, 98, 99], "stop": ["ca", "bb"]}
    whole = http.post("/v1/chat/completions", json={"messages": USER, **stops}).json()
    chunks = events(http, **stops)
    assert streamed_text(chunks) == whole["choices"][0]["message"]["content"]
    finals = [c for c in chunks[:-1] if c["choices"][0]["finish_reason"]]
    assert finals[0]["choices"][0]["stop_reason"] == whole["choices"][0]["stop_reason"]


def test_usage_chunk_and_continuous_usage(http: httpx.Client) -> None:
    chunks = events(http, max_tokens=4, ignore_eos=True, stream_options={"include_usage": True})
    usage_chunk = chunks[-2]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == 4
    assert usage_chunk["usage"]["total_tokens"] == usage_chunk["usage"]["prompt_tokens"] + 4
    assert all("usage" not in c for c in chunks[:-2])
    running = events(
        http,
        max_tokens=4,
        ignore_eos=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True},
    )
    counts = [c["usage"]["completion_tokens"] for c in running[:-2]]
    assert counts[0] == 0 and counts[-1] == 4 and counts == sorted(counts)
    assert running[1]["usage"]["completion_tokens_details"] is None


def test_return_token_ids_in_a_stream(http: httpx.Client) -> None:
    body = {"max_tokens": 6, "seed": 5, "return_token_ids": True, "ignore_eos": True}
    whole = http.post("/v1/chat/completions", json={"messages": USER, **body}).json()
    chunks = events(http, **body)[:-1]
    assert chunks[0]["prompt_token_ids"] == whole["prompt_token_ids"]
    assert all("prompt_token_ids" not in c for c in chunks[1:])
    ids = [t for c in chunks[1:] for t in c["choices"][0]["token_ids"]]
    assert ids == whole["choices"][0]["token_ids"]


def test_logprobs_per_chunk(http: httpx.Client) -> None:
    chunks = events(http, max_tokens=5, ignore_eos=True, logprobs=True, top_logprobs=2)[:-1]
    entries = [e for c in chunks[1:] for e in c["choices"][0]["logprobs"]["content"]]
    assert len(entries) == 5 and all(len(e["top_logprobs"]) == 2 for e in entries)


def test_engine_errors_arrive_in_the_stream_and_request_errors_before_it(http: httpx.Client) -> None:
    chunks = events(http, logprobs=True, top_logprobs=30)
    assert chunks == [
        {
            "error": {
                "message": "Requested sample logprobs of 30, which is greater than max allowed: 20 "
                "(parameter=logprobs, value=30)",
                "type": "BadRequestError",
                "param": "logprobs",
                "code": 400,
            }
        },
        "[DONE]",
    ]
    r = http.post("/v1/chat/completions", json={"messages": USER, "stream": True, "temperature": 3})
    assert r.status_code == 400 and r.json()["error"]["param"] == "temperature"


async def test_a_failure_after_the_stream_began_is_an_error_event_then_done() -> None:
    async def failing() -> AsyncIterator[ChatCompletionChunk]:
        yield ChatCompletionChunk(id="chatcmpl-1", created=1, model="m", choices=[])
        raise EngineError("Internal server error")

    chunks = failing()
    first = await anext(chunks)
    events = [e async for e in sse_events(first, chunks)]
    assert events[1:] == [
        'data: {"error":{"message":"Internal server error","type":"InternalServerError","param":null,'
        '"code":500}}\n\n',
        "data: [DONE]\n\n",
    ]


def test_client_streams_typed_chunks(server: LocalServer) -> None:
    with server.client() as client:
        chunks = list(client.chat.completions.create(messages=USER, max_tokens=5, seed=3, stream=True))
        whole = client.chat.completions.create(messages=USER, max_tokens=5, seed=3)
        assert "".join(c.choices[0].delta.content or "" for c in chunks) == whole.choices[0].message.content
        with pytest.raises(APIError, match="greater than max allowed"):
            list(client.chat.completions.create(messages=USER, stream=True, logprobs=True, top_logprobs=21))


async def test_async_client_streams(server: LocalServer) -> None:
    async with server.async_client() as client:
        stream = await client.chat.completions.create(
            messages=USER, max_tokens=4, stream=True, ignore_eos=True
        )
        chunks = [c async for c in stream]
    assert chunks[-1].choices[0].finish_reason == "length"
