"""Decoders for the two streaming formats: Server-Sent Events (chat) and JSON Lines (traces)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

from ._errors import StreamError, error_message

DONE = "[DONE]"


class SSEDecoder:
    """Feeds lines, yields the ``data`` payload of each complete event (``[DONE]`` included)."""

    def __init__(self) -> None:
        self._data: list[str] = []

    def feed(self, line: str) -> str | None:
        if line == "":
            if not self._data:
                return None
            data, self._data = "\n".join(self._data), []
            return data
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        if field == "data":
            self._data.append(value[1:] if value.startswith(" ") else value)
        return None


def _event(data: str) -> Any:
    obj = json.loads(data)
    if isinstance(obj, dict) and obj.get("error"):
        raise StreamError(error_message(obj, "stream error"), body=obj)
    return obj


def iter_sse(lines: Iterator[str]) -> Iterator[Any]:
    decoder = SSEDecoder()
    for line in lines:
        data = decoder.feed(line.rstrip("\r"))
        if data is None:
            continue
        if data.startswith(DONE):
            return
        yield _event(data)


async def aiter_sse(lines: AsyncIterator[str]) -> AsyncIterator[Any]:
    decoder = SSEDecoder()
    async for line in lines:
        data = decoder.feed(line.rstrip("\r"))
        if data is None:
            continue
        if data.startswith(DONE):
            return
        yield _event(data)


def iter_jsonl(lines: Iterator[str]) -> Iterator[Any]:
    for line in lines:
        if line.strip():
            yield json.loads(line)


async def aiter_jsonl(lines: AsyncIterator[str]) -> AsyncIterator[Any]:
    async for line in lines:
        if line.strip():
            yield json.loads(line)
