"""How trace routes read bodies and write answers.

Bodies are JSON whatever the Content-Type (old Weave clients send none) and are parsed by pydantic
straight from bytes; streams are JSON Lines, one object per line, no blank lines.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Annotated, Any, TypeVar

import orjson
from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, ValidationError

from ....types import traces as t
from ...auth import current_user
from ...store.users import User
from ..service import TraceService

M = TypeVar("M", bound=BaseModel)
JSONL = "application/jsonl"
STREAM_TYPES = (
    "application/jsonl",
    "application/x-ndjson",
    "application/json-lines",
    "application/x-jsonlines",
)


def json_body(model: type[M]) -> Callable[[Request], Awaitable[M]]:
    """A dependency parsing the request body as ``model`` (422 in the trace service's shape)."""

    async def parse(request: Request) -> M:
        raw = await request.body()
        try:
            return model.model_validate_json(raw)
        except ValidationError as exc:
            raise RequestValidationError(exc.errors(include_url=False), body=raw) from exc

    return parse


async def store(request: Request) -> TraceService:
    """The app's trace service (a FastAPI dependency; async, so it costs no thread hop)."""
    traces: TraceService = request.app.state.traces
    return traces


User_ = Annotated[User, Depends(current_user)]
Store = Annotated[TraceService, Depends(store)]


def ok(value: Any) -> Response:
    """A JSON response (pydantic models dumped without unset defaults)."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json", by_alias=True)
    return Response(orjson.dumps(value), media_type="application/json")


def jsonl_type(request: Request | None) -> str:
    """The JSON Lines media type the client accepts."""
    accept = request.headers.get("accept", "") if request is not None else ""
    return next((m for m in STREAM_TYPES if m in accept), JSONL)


def jsonl(chunks: Iterator[bytes], request: Request | None = None) -> StreamingResponse:
    return StreamingResponse(chunks, media_type=jsonl_type(request))


def jsonl_whole(chunks: Iterator[bytes], request: Request) -> Response:
    """JSON Lines read here and sent as one body: for small results, which streaming would cost a
    thread hop per chunk."""
    return Response(b"".join(chunks), media_type=jsonl_type(request))


def lines(items: Iterator[list[str]]) -> Iterator[bytes]:
    for chunk in items:
        if chunk:
            yield ("\n".join(chunk) + "\n").encode()


def sort_pairs(sort_by: list[t.SortBy] | None) -> list[tuple[str, str]]:
    return [(s.field, s.direction) for s in sort_by or []]
