"""Unit tests of the transport with ``httpx.MockTransport``: retries, backoff, Retry-After, the
non-idempotent POST rule, error mapping by status, headers and stream decoding."""

from __future__ import annotations

import asyncio
import email.utils
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from toolkit.client import _transport
from toolkit.client._errors import (
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    InternalServerError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
    RequestTooLargeError,
    ServiceUnavailableError,
    StreamError,
    UnprocessableEntityError,
)
from toolkit.client._transport import AsyncTransport, Config, Op, SyncTransport
from toolkit.client.deployment import Deployment
from toolkit.types.errors import ValidationErrorItem

Handler = Callable[[httpx.Request], httpx.Response]


def config(**kw: Any) -> Config:
    return Config(
        base_url="http://api.test",
        api_key="tk-secret",
        inference_url="http://infer.test/v1",
        trace_url="http://trace.test",
        deployment=Deployment("custom", "http://api.test"),
        **kw,
    )


class Recorder:
    """Answers requests from a script of responses or exceptions and remembers what was asked."""

    def __init__(self, *script: httpx.Response | Exception) -> None:
        self.script = list(script)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        step = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(step, Exception):
            raise step
        return step


class Both:
    """Runs one op through the sync or the async transport over the same handler."""

    def __init__(self, mode: str, handler: Handler, cfg: Config) -> None:
        self.mode = mode
        self.handler = handler
        self.cfg = cfg

    def run(self, op: Op[Any]) -> Any:
        if self.mode == "sync":
            t = SyncTransport(self.cfg, httpx.Client(transport=httpx.MockTransport(self.handler)))
            try:
                return t.run(op)
            finally:
                t.close()

        async def go() -> Any:
            t = AsyncTransport(self.cfg, httpx.AsyncClient(transport=httpx.MockTransport(self.handler)))
            try:
                return await t.run(op)
            finally:
                await t.close()

        return asyncio.run(go())

    def stream(self, op: Op[Any]) -> list[Any]:
        if self.mode == "sync":
            t = SyncTransport(self.cfg, httpx.Client(transport=httpx.MockTransport(self.handler)))
            try:
                return list(t.stream(op))
            finally:
                t.close()

        async def go() -> list[Any]:
            t = AsyncTransport(self.cfg, httpx.AsyncClient(transport=httpx.MockTransport(self.handler)))
            try:
                return [item async for item in t.stream(op)]
            finally:
                await t.close()

        return asyncio.run(go())


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every back-off delay the transports asked for (no real sleeping); jitter pinned to its top."""
    delays: list[float] = []

    async def fake_async_sleep(delay: float) -> None:
        delays.append(delay)

    monkeypatch.setattr(_transport.time, "sleep", delays.append)
    monkeypatch.setattr(_transport.asyncio, "sleep", fake_async_sleep)
    monkeypatch.setattr(_transport.random, "random", lambda: 0.0)
    return delays


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def get(path: str = "/v1/thing", **kw: Any) -> Op[Any]:
    return Op("GET", path, lambda body: body, **kw)


def post(path: str = "/v1/thing", **kw: Any) -> Op[Any]:
    return Op("POST", path, lambda body: body, json={"a": 1}, **kw)


def ok(body: Any = None, **kw: Any) -> httpx.Response:
    return httpx.Response(200, json={"ok": True} if body is None else body, **kw)


def refused() -> httpx.ConnectError:
    return httpx.ConnectError("connection refused")


# ----------------------------------------------------------------------------- retries


def test_get_retries_5xx_and_429_with_exponential_backoff(mode: str, sleeps: list[float]) -> None:
    rec = Recorder(httpx.Response(503), httpx.Response(429), ok())
    assert Both(mode, rec, config()).run(get()) == {"ok": True}
    assert len(rec.requests) == 3
    assert sleeps == [0.5, 1.0]


def test_retries_stop_after_max_retries(mode: str, sleeps: list[float]) -> None:
    rec = Recorder(httpx.Response(500, json={"detail": "boom"}))
    with pytest.raises(InternalServerError) as err:
        Both(mode, rec, config(max_retries=3)).run(get())
    assert len(rec.requests) == 4
    assert sleeps == [0.5, 1.0, 2.0]
    assert err.value.status_code == 500
    assert str(err.value) == "Error code: 500 - boom"


def test_backoff_is_capped_and_jittered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_transport.random, "random", lambda: 0.0)
    assert [_transport.retry_delay(n, None) for n in range(6)] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    monkeypatch.setattr(_transport.random, "random", lambda: 1.0)
    assert [_transport.retry_delay(n, None) for n in range(5)] == [0.375, 0.75, 1.5, 3.0, 6.0]


def test_no_retry_on_other_client_errors(mode: str, sleeps: list[float]) -> None:
    rec = Recorder(httpx.Response(400, json={"detail": "bad"}))
    with pytest.raises(BadRequestError):
        Both(mode, rec, config()).run(get())
    assert (len(rec.requests), sleeps) == (1, [])


def test_retry_after_seconds_is_honoured(mode: str, sleeps: list[float]) -> None:
    rec = Recorder(httpx.Response(429, headers={"Retry-After": "3"}), ok())
    assert Both(mode, rec, config()).run(get()) == {"ok": True}
    assert sleeps == [3.0]


def test_retry_after_ms_and_fractions(mode: str, sleeps: list[float]) -> None:
    rec = Recorder(
        httpx.Response(503, headers={"retry-after-ms": "1500", "retry-after": "9"}),
        httpx.Response(503, headers={"retry-after": "0.25"}),
        ok(),
    )
    Both(mode, rec, config()).run(get())
    assert sleeps == [1.5, 0.25]


def test_retry_after_http_date_and_caps(mode: str, sleeps: list[float]) -> None:
    past = email.utils.formatdate(time.time() - 3600, usegmt=True)
    future = email.utils.formatdate(time.time() + 7200, usegmt=True)
    rec = Recorder(
        httpx.Response(503, headers={"Retry-After": past}),
        httpx.Response(503, headers={"Retry-After": future}),
        httpx.Response(503, headers={"Retry-After": "600"}),
        httpx.Response(503, headers={"Retry-After": "soon"}),
        ok(),
    )
    Both(mode, rec, config(max_retries=4)).run(get())
    assert sleeps == [0.0, 60.0, 60.0, 4.0]  # "soon" is not a delay: plain back-off (attempt 3)


def test_connection_errors_are_retried_then_raised(mode: str, sleeps: list[float]) -> None:
    rec = Recorder(refused())
    with pytest.raises(APIConnectionError) as err:
        Both(mode, rec, config(max_retries=2)).run(get())
    assert not isinstance(err.value, APITimeoutError)
    assert len(rec.requests) == 3
    assert sleeps == [0.5, 1.0]
    rec = Recorder(refused(), httpx.ReadError("reset"), ok())
    assert Both(mode, rec, config()).run(get()) == {"ok": True}


def test_timeouts(mode: str, sleeps: list[float]) -> None:
    rec = Recorder(httpx.ReadTimeout("slow"))
    with pytest.raises(APITimeoutError):
        Both(mode, rec, config(max_retries=1)).run(get())
    assert len(rec.requests) == 2
    # A POST whose read timed out was sent: not retried. One whose connect timed out was not: retried.
    rec = Recorder(httpx.ReadTimeout("slow"))
    with pytest.raises(APITimeoutError):
        Both(mode, rec, config()).run(post())
    assert len(rec.requests) == 1
    rec = Recorder(httpx.ConnectTimeout("slow"), ok())
    assert Both(mode, rec, config()).run(post()) == {"ok": True}
    assert len(rec.requests) == 2


def test_post_is_never_retried_after_it_was_sent(mode: str, sleeps: list[float]) -> None:
    for failure in (
        httpx.Response(500),
        httpx.Response(503, headers={"Retry-After": "1"}),
        httpx.Response(429),
        httpx.ReadError("connection reset"),
        httpx.RemoteProtocolError("server disconnected"),
    ):
        rec = Recorder(failure, ok())
        with pytest.raises((APIStatusError, APIConnectionError)):
            Both(mode, rec, config(max_retries=5)).run(post())
        assert len(rec.requests) == 1, failure
    assert sleeps == []


def test_post_is_retried_when_the_connection_failed_before_sending(mode: str, sleeps: list[float]) -> None:
    rec = Recorder(refused(), refused(), ok({"id": "x"}))
    assert Both(mode, rec, config()).run(post()) == {"id": "x"}
    assert [r.method for r in rec.requests] == ["POST"] * 3
    assert [r.content for r in rec.requests] == [b'{"a":1}'] * 3
    assert sleeps == [0.5, 1.0]


def test_idempotent_post_and_non_retryable_delete(mode: str, sleeps: list[float]) -> None:
    rec = Recorder(httpx.Response(502), ok())
    assert Both(mode, rec, config()).run(post(idempotent=True)) == {"ok": True}
    assert len(rec.requests) == 2
    rec = Recorder(httpx.Response(502), ok())
    with pytest.raises(InternalServerError):
        Both(mode, rec, config()).run(Op("DELETE", "/v1/x", lambda b: b, idempotent=False))
    assert len(rec.requests) == 1


def test_max_retries_zero(mode: str, sleeps: list[float]) -> None:
    rec = Recorder(refused())
    with pytest.raises(APIConnectionError):
        Both(mode, rec, config(max_retries=0)).run(get())
    assert (len(rec.requests), sleeps) == (1, [])


# ----------------------------------------------------------------------------- error mapping


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (400, BadRequestError),
        (401, AuthenticationError),
        (403, PermissionDeniedError),
        (404, NotFoundError),
        (409, ConflictError),
        (413, RequestTooLargeError),
        (422, UnprocessableEntityError),
        (429, RateLimitError),
        (500, InternalServerError),
        (502, InternalServerError),
        (503, ServiceUnavailableError),
        (418, APIStatusError),
    ],
)
def test_errors_are_named_by_status(mode: str, sleeps: list[float], status: int, cls: type) -> None:
    rec = Recorder(httpx.Response(status, json={"detail": "nope"}))
    with pytest.raises(APIStatusError) as err:
        Both(mode, rec, config(max_retries=0)).run(get())
    assert type(err.value) is cls
    assert (err.value.status_code, err.value.body, err.value.detail) == (status, {"detail": "nope"}, [])
    assert err.value.message == f"Error code: {status} - nope"
    assert err.value.response.status_code == status
    assert err.value.request is not None and err.value.request.url.path == "/v1/thing"


def test_validation_detail_is_parsed(mode: str, sleeps: list[float]) -> None:
    body = {
        "detail": [
            {"loc": ["body", "split"], "msg": "Field required", "type": "missing"},
            {"loc": ["body", "trajectory_groups", 0], "msg": "bad", "type": "value_error"},
            "not an item",
        ]
    }
    rec = Recorder(httpx.Response(422, json=body))
    with pytest.raises(UnprocessableEntityError) as err:
        Both(mode, rec, config()).run(post())
    assert err.value.detail == [
        ValidationErrorItem(loc=["body", "split"], msg="Field required", type="missing"),
        ValidationErrorItem(loc=["body", "trajectory_groups", 0], msg="bad", type="value_error"),
    ]
    assert str(err.value) == "Error code: 422 - body.split: Field required; body.trajectory_groups.0: bad"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"error": {"message": "bad temperature", "type": "BadRequestError", "param": "t", "code": 400}},
            "bad temperature",
        ),
        ({"error": "plain"}, "plain"),
        ({"reason": "weave says no"}, "weave says no"),
        ("not json", "Bad Request"),
    ],
)
def test_error_bodies_of_every_service(mode: str, body: Any, message: str) -> None:
    response = httpx.Response(400, json=body) if not isinstance(body, str) else httpx.Response(400, text=body)
    with pytest.raises(BadRequestError) as err:
        Both(mode, Recorder(response), config()).run(get())
    assert str(err.value) == f"Error code: 400 - {message}"
    assert err.value.body == body


# ----------------------------------------------------------------------------- requests


def test_headers_urls_and_params(mode: str) -> None:
    rec = Recorder(ok())
    both = Both(mode, rec, config(project="team/proj"))
    both.run(Op("GET", "/v1/preview/x", lambda b: b, params={"after": None, "limit": 5, "order": "asc"}))
    both.run(Op("POST", "/chat/completions", lambda b: b, service="inference", json={}))
    both.run(Op("POST", "/call/start", lambda b: b, service="traces", json={}, headers={"X-Extra": "1"}))
    api, infer, trace = rec.requests
    assert str(api.url) == "http://api.test/v1/preview/x?limit=5&order=asc"
    assert str(infer.url) == "http://infer.test/v1/chat/completions"
    assert str(trace.url) == "http://trace.test/call/start"
    for request in rec.requests:
        assert request.headers["authorization"] == "Bearer tk-secret"
        assert request.headers["user-agent"] == "toolkit-python/0.1.0"
    assert infer.headers["openai-project"] == "team/proj"
    assert "openai-project" not in api.headers and "openai-project" not in trace.headers
    assert trace.headers["x-extra"] == "1"


def test_no_key_no_auth_header(mode: str) -> None:
    rec = Recorder(ok())
    cfg = config()
    cfg.api_key = None
    Both(mode, rec, cfg).run(get())
    assert "authorization" not in rec.requests[0].headers


def test_parse_and_raw_and_empty_bodies(mode: str) -> None:
    rec = Recorder(httpx.Response(200, content=b"\x00\x01"))
    assert Both(mode, rec, config()).run(Op("GET", "/f", bytes, raw=True)) == b"\x00\x01"
    rec = Recorder(httpx.Response(204))
    assert Both(mode, rec, config()).run(Op("DELETE", "/f", lambda b: ("parsed", b))) == ("parsed", None)


# ----------------------------------------------------------------------------- streams through the transport


def sse_response(*chunks: bytes, status: int = 200) -> httpx.Response:
    return httpx.Response(status, content=b"".join(chunks), headers={"content-type": "text/event-stream"})


def test_sse_stream(mode: str) -> None:
    rec = Recorder(sse_response(b'data: {"n": 1}\n\n: keep-alive\n\ndata: {"n": 2}\n\n', b"data: [DONE]\n\n"))
    items = Both(mode, rec, config()).stream(Op("POST", "/c", lambda d: d["n"], json={}, stream="sse"))
    assert items == [1, 2]


def test_sse_error_event_raises_stream_error(mode: str) -> None:
    rec = Recorder(
        sse_response(b'data: {"n": 1}\n\ndata: {"error": {"message": "engine died", "code": 500}}\n\n')
    )
    with pytest.raises(StreamError) as err:
        Both(mode, rec, config()).stream(Op("POST", "/c", lambda d: d, json={}, stream="sse"))
    assert str(err.value) == "engine died"
    assert err.value.body == {"error": {"message": "engine died", "code": 500}}


def test_jsonl_stream(mode: str) -> None:
    rec = Recorder(httpx.Response(200, content=b'{"id": 1}\n\n{"id": 2}\n'))
    items = Both(mode, rec, config()).stream(Op("POST", "/q", lambda d: d["id"], json={}, stream="jsonl"))
    assert items == [1, 2]


def test_stream_error_status_is_raised_before_any_item(mode: str, sleeps: list[float]) -> None:
    rec = Recorder(httpx.Response(404, json={"detail": "no such model"}))
    with pytest.raises(NotFoundError) as err:
        Both(mode, rec, config()).stream(Op("POST", "/c", lambda d: d, json={}, stream="sse"))
    assert err.value.body == {"detail": "no such model"}
    rec = Recorder(httpx.Response(503), sse_response(b'data: {"n": 7}\n\n'))
    assert Both(mode, rec, config()).stream(Op("GET", "/c", lambda d: d["n"], stream="sse")) == [7]
    assert sleeps == [0.5]


def test_conflict_is_not_retried_even_when_idempotent(mode: str, sleeps: list[float]) -> None:
    rec = Recorder(httpx.Response(409, json={"detail": "exists with another base model"}), ok())
    with pytest.raises(ConflictError):
        Both(mode, rec, config()).run(post(idempotent=True))
    assert (len(rec.requests), sleeps) == (1, [])


def test_request_timeout_is_retried_for_reads(mode: str, sleeps: list[float]) -> None:
    rec = Recorder(httpx.Response(408), httpx.Response(504), ok())
    assert Both(mode, rec, config()).run(get()) == {"ok": True}
    assert sleeps == [0.5, 1.0]


def test_hostile_retry_after_values_never_break_the_sleep(mode: str, sleeps: list[float]) -> None:
    rec = Recorder(
        httpx.Response(503, headers={"retry-after-ms": "-5000"}),
        httpx.Response(503, headers={"retry-after-ms": "nan"}),
        httpx.Response(503, headers={"retry-after-ms": "inf"}),
        httpx.Response(503, headers={"retry-after": "-3"}),
        ok(),
    )
    assert Both(mode, rec, config(max_retries=4)).run(get()) == {"ok": True}
    assert sleeps == [0.0, 0.0, 60.0, 4.0]
