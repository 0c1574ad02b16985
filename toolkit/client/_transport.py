"""HTTP transport: each operation is described once as data (:class:`Op`) and run by a thin sync or
async executor that adds auth, timeouts, retries with backoff, error mapping and stream decoding."""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

import httpx

from .._version import __version__
from . import _links
from ._errors import APIConnectionError, APIStatusError, APITimeoutError, status_error
from ._streaming import aiter_jsonl, aiter_sse, iter_jsonl, iter_sse
from .deployment import Deployment, Extension

T = TypeVar("T")
Service = Literal["api", "inference", "traces"]
# Transient statuses only: this API answers 409 for a lasting conflict (model exists with another base).
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
MAX_RETRY_AFTER = 60.0
# As many idle connections kept as there may be connections: httpcore 1.0.x closes "surplus" idle ones
# while the pool holds more than max_keepalive_connections of any kind, and a pass could so close an
# idle connection it had just handed to a waiting request; closed under that request's read, it hid
# the server's answer until the read timeout (encode/httpcore#1110; issue 25's stall,
# tests/client/test_client_pool_handoff.py). With the two equal, that rule never applies.
LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=100)


@dataclass(frozen=True)
class Op(Generic[T]):
    """One HTTP operation: where it goes, what it sends, how its answer is parsed.

    ``idempotent`` marks operations that may be retried after they were sent (reads, deletes, and
    POSTs the server treats as idempotent). Any request is retried when the connection failed
    before it was sent. ``extension`` marks a local-server extension: a deployment without it
    raises :class:`~toolkit.client.UnsupportedOperation` instead.
    """

    method: str
    path: str
    parse: Callable[[Any], T]
    service: Service = "api"
    json: Any = None
    params: dict[str, Any] | None = None
    files: Any = None
    data: dict[str, Any] | None = None
    idempotent: bool | None = None
    stream: Literal["sse", "jsonl", "bytes"] | None = None
    raw: bool = False
    headers: dict[str, str] = field(default_factory=dict)
    extension: Extension | None = None
    link: _links.Link | None = None  # what an open experiment records of it (models, jobs, artifacts)

    @property
    def retryable(self) -> bool:
        return self.idempotent if self.idempotent is not None else self.method in IDEMPOTENT_METHODS


@dataclass
class Config:
    """Where the three services live, what kind of deployment they are and how to talk to them."""

    base_url: str
    api_key: str | None
    inference_url: str
    trace_url: str
    deployment: Deployment
    project: str | None = None
    timeout: float = 600.0
    connect_timeout: float = 5.0
    max_retries: int = 2

    def url(self, service: Service, path: str) -> str:
        root = {"api": self.base_url, "inference": self.inference_url, "traces": self.trace_url}[service]
        return root.rstrip("/") + path

    def headers(self, service: Service) -> dict[str, str]:
        headers = {"User-Agent": f"toolkit-python/{__version__}", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        if self.project and service == "inference":
            headers["OpenAI-Project"] = self.project
        return headers

    def httpx_timeout(self) -> httpx.Timeout:
        return httpx.Timeout(self.timeout, connect=self.connect_timeout)


def _params(params: dict[str, Any] | None) -> dict[str, Any] | None:
    return {k: v for k, v in params.items() if v is not None} if params else None


def _body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text


def retry_delay(attempt: int, response: httpx.Response | None) -> float:
    """Honour ``retry-after-ms`` / ``retry-after`` (seconds or HTTP date), else exponential backoff."""
    if response is not None:
        headers = response.headers
        try:
            if "retry-after-ms" in headers:
                seconds = float(headers["retry-after-ms"]) / 1000
                return max(0.0, min(seconds, MAX_RETRY_AFTER))  # negative or NaN: no wait
            if "retry-after" in headers:
                value = headers["retry-after"]
                if value.replace(".", "", 1).isdigit():
                    return min(float(value), MAX_RETRY_AFTER)
                parsed = email.utils.parsedate_to_datetime(value)
                return max(0.0, min(parsed.timestamp() - time.time(), MAX_RETRY_AFTER))
        except (TypeError, ValueError):
            pass
    return min(0.5 * 2**attempt, 8.0) * (1 - 0.25 * random.random())


def _should_retry(op: Op[Any], attempt: int, max_retries: int, *, sent: bool, status: int | None) -> bool:
    if attempt >= max_retries:
        return False
    if not sent:  # the request never left: always safe
        return True
    return op.retryable and (status is None or status in RETRY_STATUSES)


def _build(config: Config, op: Op[Any]) -> dict[str, Any]:
    return {
        "method": op.method,
        "url": config.url(op.service, op.path),
        "headers": {**config.headers(op.service), **op.headers},
        "params": _params(op.params),
        "json": op.json,
        "files": op.files,
        "data": op.data,
    }


def _result(op: Op[T], response: httpx.Response) -> T:
    if op.raw:
        return op.parse(response.content)
    return op.parse(_body(response) if response.content else None)


class RetryPolicy:
    """Decides, attempt by attempt, whether an operation is sent again and after how long;
    raises the mapped error when it is not (:class:`UnsupportedOperation` for an extension whose
    route the deployment lacks). An extension known to be absent is refused before it is sent."""

    def __init__(self, op: Op[Any], config: Config) -> None:
        config.deployment.require(op.extension)
        self.op = op
        self.deployment = config.deployment
        self.max_retries = config.max_retries
        self.attempt = 0

    def after_exception(self, exc: httpx.TransportError, request: httpx.Request) -> float:
        sent = not isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
        if not _should_retry(self.op, self.attempt, self.max_retries, sent=sent, status=None):
            if isinstance(exc, httpx.TimeoutException):
                raise APITimeoutError(request) from exc
            raise APIConnectionError(str(exc) or "Connection error.", request=request) from exc
        return self._next(None)

    def after_response(self, response: httpx.Response) -> float:
        if not _should_retry(self.op, self.attempt, self.max_retries, sent=True, status=response.status_code):
            body = _body(response)
            error = status_error(response, body)
            unsupported = self.deployment.route_absent(self.op.extension, response, body)
            if unsupported is not None:
                raise unsupported from error
            raise error
        return self._next(response)

    def _next(self, response: httpx.Response | None) -> float:
        delay = retry_delay(self.attempt, response)
        self.attempt += 1
        return delay


class SyncTransport:
    def __init__(self, config: Config, http: httpx.Client | None = None) -> None:
        self.config = config
        self.http = http or httpx.Client(timeout=config.httpx_timeout(), limits=LIMITS)

    def close(self) -> None:
        self.http.close()

    def _send(self, op: Op[Any], *, stream: bool) -> httpx.Response:
        policy = RetryPolicy(op, self.config)
        while True:
            request = self.http.build_request(**_build(self.config, op))
            try:
                response = self.http.send(request, stream=stream)
            except httpx.TransportError as exc:
                time.sleep(policy.after_exception(exc, request))
                continue
            if response.is_success:
                return response
            if stream:
                response.read()
                response.close()
            time.sleep(policy.after_response(response))

    def run(self, op: Op[T]) -> T:
        result = _result(op, self._send(op, stream=False))
        _links.saw(op.link, op.json, op.files, result, self.config)
        return result

    def stream(self, op: Op[T]) -> Iterator[T]:
        response = self._send(op, stream=True)
        try:
            if op.stream == "bytes":
                items: Iterator[Any] = response.iter_bytes()
            else:
                decode = iter_sse if op.stream == "sse" else iter_jsonl
                items = decode(response.iter_lines())
            for item in items:
                yield op.parse(item)
        finally:
            response.close()


class AsyncTransport:
    def __init__(self, config: Config, http: httpx.AsyncClient | None = None) -> None:
        self.config = config
        self.http = http or httpx.AsyncClient(timeout=config.httpx_timeout(), limits=LIMITS)

    async def close(self) -> None:
        await self.http.aclose()

    async def _send(self, op: Op[Any], *, stream: bool) -> httpx.Response:
        policy = RetryPolicy(op, self.config)
        while True:
            request = self.http.build_request(**_build(self.config, op))
            try:
                response = await self.http.send(request, stream=stream)
            except httpx.TransportError as exc:
                await asyncio.sleep(policy.after_exception(exc, request))
                continue
            if response.is_success:
                return response
            if stream:
                await response.aread()
                await response.aclose()
            await asyncio.sleep(policy.after_response(response))

    async def run(self, op: Op[T]) -> T:
        result = _result(op, await self._send(op, stream=False))
        _links.saw(op.link, op.json, op.files, result, self.config)
        return result

    async def stream(self, op: Op[T]) -> AsyncIterator[T]:
        response = await self._send(op, stream=True)
        try:
            if op.stream == "bytes":
                items: AsyncIterator[Any] = response.aiter_bytes()
            else:
                decode = aiter_sse if op.stream == "sse" else aiter_jsonl
                items = decode(response.aiter_lines())
            async for item in items:
                yield op.parse(item)
        finally:
            await response.aclose()


__all__ = ["APIStatusError", "AsyncTransport", "Config", "Op", "SyncTransport"]
