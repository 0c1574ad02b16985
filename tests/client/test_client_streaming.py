"""The two stream decoders: Server-Sent Events (chat) and JSON Lines (traces)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable
from typing import Any

import pytest

from toolkit.client._errors import StreamError
from toolkit.client._streaming import SSEDecoder, aiter_jsonl, aiter_sse, iter_jsonl, iter_sse


async def alines(lines: Iterable[str]) -> AsyncIterator[str]:
    for line in lines:
        yield line


async def acollect(items: AsyncIterator[Any]) -> list[Any]:
    return [item async for item in items]


def lines_of(text: str) -> list[str]:
    """What ``httpx.Response.iter_lines`` yields: lines without their ending."""
    return text.splitlines()


@pytest.fixture(params=["sync", "async"])
def sse(request: pytest.FixtureRequest) -> Any:
    if request.param == "sync":
        return lambda text: list(iter_sse(iter(lines_of(text))))

    def run(text: str) -> list[Any]:
        return asyncio.run(acollect(aiter_sse(alines(lines_of(text)))))

    return run


@pytest.fixture(params=["sync", "async"])
def jsonl(request: pytest.FixtureRequest) -> Any:
    if request.param == "sync":
        return lambda text: list(iter_jsonl(iter(lines_of(text))))

    def run(text: str) -> list[Any]:
        return asyncio.run(acollect(aiter_jsonl(alines(lines_of(text)))))

    return run


def test_sse_events_in_order(sse: Any) -> None:
    text = 'data: {"i": 0}\n\ndata: {"i": 1}\n\ndata: {"i": 2}\n\n'
    assert sse(text) == [{"i": 0}, {"i": 1}, {"i": 2}]


def test_sse_multi_line_data_is_joined_with_newlines(sse: Any) -> None:
    text = 'data: {"text":\ndata: "two lines",\ndata:"n": 3}\n\n'
    assert sse(text) == [{"text": "two lines", "n": 3}]
    decoder = SSEDecoder()
    assert [decoder.feed(line) for line in ["data: a", "data:  b", "data:c", ""]] == [
        None,
        None,
        None,
        "a\n b\nc",
    ]


def test_sse_comments_other_fields_and_blank_runs_are_skipped(sse: Any) -> None:
    text = (
        ": this is a comment\n\n"
        "\n\n"
        'event: message\nid: 7\nretry: 1000\ndata: {"a": 1}\n\n'
        ":keep-alive\n"
        'data: {"a": 2}\n'
        ": comment inside an event\n"
        "\n"
    )
    assert sse(text) == [{"a": 1}, {"a": 2}]


def test_sse_crlf_and_done(sse: Any) -> None:
    chunks = ['data: {"a": 1}\r', "\r", "data: [DONE]\r", "\r", 'data: {"after": "done"}', ""]
    assert list(iter_sse(iter(chunks))) == [{"a": 1}]
    assert sse('data: {"a": 1}\n\ndata: [DONE]\n\ndata: {"never": true}\n\n') == [{"a": 1}]


def test_sse_incomplete_last_event_is_dropped(sse: Any) -> None:
    assert sse('data: {"a": 1}\n\ndata: {"partial": true}') == [{"a": 1}]


def test_sse_error_event_raises_stream_error(sse: Any) -> None:
    text = (
        'data: {"a": 1}\n\n'
        'data: {"error": {"object": "error", "message": "out of memory", "type": "InternalServerError", '
        '"param": null, "code": 500}}\n\n'
        'data: {"a": 2}\n\n'
    )
    got: list[Any] = []
    with pytest.raises(StreamError) as err:
        for item in iter_sse(iter(lines_of(text))):
            got.append(item)
    assert got == [{"a": 1}]
    assert str(err.value) == "out of memory"
    assert err.value.body["error"]["code"] == 500
    with pytest.raises(StreamError, match=r"^overloaded$"):
        sse('data: {"error": "overloaded"}\n\n')
    assert sse('data: {"error": null, "a": 1}\n\n') == [{"error": None, "a": 1}]


def test_sse_invalid_json_raises(sse: Any) -> None:
    with pytest.raises(json.JSONDecodeError):
        sse("data: {not json\n\n")


def test_jsonl(jsonl: Any) -> None:
    assert jsonl('{"id": 1}\n\n   \n{"id": 2, "nested": {"a": [1, 2]}}\n[3]\n"text"') == [
        {"id": 1},
        {"id": 2, "nested": {"a": [1, 2]}},
        [3],
        "text",
    ]
    assert jsonl("") == []
    with pytest.raises(json.JSONDecodeError):
        jsonl('{"id": 1}\n{"id": \n')
