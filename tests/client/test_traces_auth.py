"""How the trace client authenticates: Basic ``api:<key>`` on W&B's hosted Weave (as Weave's own client
does there), Bearer on the local server and custom URLs (unit level, httpx MockTransport)."""

from __future__ import annotations

import base64
import json

import httpx
import pytest

import toolkit as tk
from toolkit.client._transport import AsyncTransport, Config, SyncTransport
from toolkit.client.deployment import Deployment
from toolkit.client.traces import AsyncTraces, Traces, is_wandb_hosted

KEY = "k-123"
BASIC = "Basic " + base64.b64encode(f"api:{KEY}".encode()).decode()
CALL = {"id": "c1", "project_id": "e/p", "op_name": "op", "trace_id": "t1", "started_at": "2025-01-01T00:00Z"}


def config(trace_url: str, api_key: str | None = KEY) -> Config:
    return Config(
        base_url="http://127.0.0.1:1",
        api_key=api_key,
        inference_url="http://127.0.0.1:1/v1",
        trace_url=trace_url,
        deployment=Deployment.for_url("http://127.0.0.1:1"),
        max_retries=0,
    )


class Recorder:
    """A mock trace service that answers health, call reads and call streams, recording auth."""

    def __init__(self) -> None:
        self.auth: list[str | None] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.auth.append(request.headers.get("authorization"))
        if request.url.path.endswith("/health"):
            return httpx.Response(200, json={"status": "ok"})
        if request.url.path.endswith("/calls/stream_query"):
            return httpx.Response(200, content=json.dumps(CALL).encode() + b"\n")
        return httpx.Response(200, json={"call": CALL})


def sync_traces(trace_url: str, api_key: str | None = KEY) -> tuple[Traces, Recorder]:
    recorder = Recorder()
    http = httpx.Client(transport=httpx.MockTransport(recorder))
    transport = SyncTransport(config(trace_url, api_key), http)
    return Traces(transport), recorder


def run_all(traces: Traces) -> None:
    """One GET, one JSON POST and one JSON-Lines stream."""
    assert traces.health().status == "ok"
    read = traces.call_read(project_id="e/p", id="c1").call
    assert read is not None and read.id == "c1"
    assert [c.id for c in traces.calls_query(project_id="e/p")] == ["c1"]


@pytest.mark.parametrize(
    "url", ["https://trace.wandb.ai", "https://trace.wandb.ai/", "https://acme.wandb.io/traces"]
)
def test_wandb_hosted_weave_gets_basic_api_key(url: str) -> None:
    traces, recorder = sync_traces(url)
    run_all(traces)
    assert recorder.auth == [BASIC] * 3


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8000/traces", "https://traces.example.com", "https://notwandb.ai/traces"]
)
def test_local_and_custom_trace_urls_keep_bearer(url: str) -> None:
    traces, recorder = sync_traces(url)
    run_all(traces)
    assert recorder.auth == [f"Bearer {KEY}"] * 3


def test_no_key_sends_no_authorization() -> None:
    traces, recorder = sync_traces("https://trace.wandb.ai", api_key=None)
    assert traces.health().status == "ok"
    assert recorder.auth == [None]


@pytest.mark.parametrize(
    ("url", "expected"),
    [("https://trace.wandb.ai", BASIC), ("http://127.0.0.1:8000/traces", f"Bearer {KEY}")],
)
async def test_async_client_authenticates_the_same_way(url: str, expected: str) -> None:
    recorder = Recorder()
    async with httpx.AsyncClient(transport=httpx.MockTransport(recorder)) as http:
        traces = AsyncTraces(AsyncTransport(config(url), http))
        assert (await traces.health()).status == "ok"
        assert [c.id async for c in traces.calls_query(project_id="e/p")] == ["c1"]
    assert recorder.auth == [expected, expected]


def test_wandb_preset_points_traces_at_hosted_weave(monkeypatch: pytest.MonkeyPatch) -> None:
    """``TOOLKIT_PRESET=wandb``: the client's trace URL is W&B's, so its trace calls use Basic."""
    monkeypatch.setenv("TOOLKIT_PRESET", "wandb")
    monkeypatch.setenv("WANDB_API_KEY", KEY)
    for name in ("TOOLKIT_BASE_URL", "TOOLKIT_API_KEY", "TOOLKIT_TRACE_URL"):
        monkeypatch.delenv(name, raising=False)
    with tk.connect() as client:
        assert is_wandb_hosted(client.config.trace_url)
        recorder = Recorder()
        transport = SyncTransport(client.config, httpx.Client(transport=httpx.MockTransport(recorder)))
        assert Traces(transport).health().status == "ok"
    assert recorder.auth == [BASIC]
