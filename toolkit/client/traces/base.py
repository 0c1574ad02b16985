"""What the noun modules share: request models from keywords, the JSON and JSON-Lines op builders,
and the resource bases that run ops with the trace service's auth."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel

from ...types import traces as t
from .._transport import AsyncTransport, Op, SyncTransport
from .auth import trace_auth_headers

R = TypeVar("R", bound=BaseModel)
T = TypeVar("T")


def request(model: type[R], req: R | Mapping[str, Any] | None, fields: Mapping[str, Any]) -> R:
    """The request model from a model instance, a mapping, or keyword fields."""
    if isinstance(req, model):
        return req.model_copy(update=dict(fields)) if fields else req
    return model.model_validate({**(dict(req) if req else {}), **fields})


def body(req: BaseModel) -> Any:
    return req.model_dump(mode="json", by_alias=True, exclude_none=True)


def post(path: str, req: BaseModel, parse: Any, *, idempotent: bool = False) -> Op[Any]:
    return Op("POST", path, parse, service="traces", json=body(req), idempotent=idempotent)


def stream(path: str, req: BaseModel, parse: Any) -> Op[Any]:
    return Op(
        "POST",
        path,
        parse,
        service="traces",
        json=body(req),
        stream="jsonl",
        idempotent=True,
        headers={"Accept": "application/jsonl"},
    )


def purge_query(ids: Sequence[str]) -> t.Query:
    """The query ``/feedback/purge`` and ``/cost/purge`` accept: ``id`` equal to one of ``ids``."""
    eqs = [{"$eq": [{"$getField": "id"}, {"$literal": i}]} for i in ids]
    return t.Query.model_validate({"$expr": eqs[0] if len(eqs) == 1 else {"$or": eqs}})


def _with_auth(op: Op[T], auth: dict[str, str]) -> Op[T]:
    return dataclasses.replace(op, headers={**op.headers, **auth}) if auth else op


class SyncResource:
    """Runs trace ops on a sync transport (see :mod:`.auth` for the header it may add)."""

    def __init__(self, transport: SyncTransport) -> None:
        self._t = transport
        self._auth = trace_auth_headers(transport.config)

    def _run(self, op: Op[T]) -> T:
        return self._t.run(_with_auth(op, self._auth))

    def _stream(self, op: Op[T]) -> Iterator[T]:
        return self._t.stream(_with_auth(op, self._auth))


class AsyncResource:
    """Runs trace ops on an async transport."""

    def __init__(self, transport: AsyncTransport) -> None:
        self._t = transport
        self._auth = trace_auth_headers(transport.config)

    async def _run(self, op: Op[T]) -> T:
        return await self._t.run(_with_auth(op, self._auth))

    def _stream(self, op: Op[T]) -> AsyncIterator[T]:
        return self._t.stream(_with_auth(op, self._auth))
