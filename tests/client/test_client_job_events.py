"""Following a job's events at unit level (``httpx.MockTransport``): a deployment with the extensions
is asked to hold each request (``wait``) and is asked again at once; a deployment that answers
early and empty anyway, and the hosted API, which has no long poll, are polled every
``poll_interval``."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from support.client_helpers import fake_config
from toolkit.client import jobs
from toolkit.client._transport import AsyncTransport, SyncTransport
from toolkit.client.jobs import AsyncTrainingJobHandle, TrainingJobHandle


def event(n: int, kind: str = "gradient_step") -> dict[str, Any]:
    return {"id": f"e{n}", "type": kind, "data": {}}


class Events:
    """Answers the event pages in turn: two events, an empty page, then the terminal event; records
    each request's ``wait``."""

    def __init__(self) -> None:
        self.pages = [[event(1, "training_started"), event(2)], [], [event(3, "training_ended")]]
        self.waits: list[str | None] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.waits.append(request.url.params.get("wait"))
        data = self.pages.pop(0)
        return httpx.Response(200, json={"object": "list", "data": data, "has_more": False})


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(jobs.time, "sleep", slept.append)
    return slept


@pytest.mark.parametrize(
    ("deployment", "wait", "pauses"),
    [
        ("local", "10.0", [0.25]),  # no pause after events; one after the early empty page
        ("custom", "10.0", [0.25]),
        ("wandb", None, [0.25, 0.25]),  # polled: a pause after every page but the last
    ],
)
def test_following_asks_for_long_polls_where_the_extensions_are(
    deployment: str, wait: str | None, pauses: list[float], sleeps: list[float]
) -> None:
    server = Events()
    with httpx.Client(transport=httpx.MockTransport(server)) as http:
        handle = TrainingJobHandle.bind("j", SyncTransport(fake_config(deployment), http))
        types = [e.type for e in handle.events(poll_interval=0.25)]
    assert types == ["training_started", "gradient_step", "training_ended"]
    assert server.waits == [wait] * 3
    assert sleeps == pauses


def test_a_pause_only_after_a_long_poll_that_came_back_early_and_empty() -> None:
    assert not jobs._pause(10.0, got_events=False, seconds=10.0)  # held to its end: ask again now
    assert not jobs._pause(10.0, got_events=True, seconds=0.01)  # events: ask for the next now
    assert jobs._pause(10.0, got_events=False, seconds=0.01)  # ignored (or the connection failed)
    assert jobs._pause(None, got_events=True, seconds=0.01)  # plain polling


def test_the_async_handle_asks_for_long_polls_too() -> None:
    server = Events()

    async def follow() -> list[str]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(server)) as http:
            handle = AsyncTrainingJobHandle.bind("j", AsyncTransport(fake_config("local"), http))
            return [e.type async for e in handle.events(poll_interval=0.01)]

    assert asyncio.run(follow()) == ["training_started", "gradient_step", "training_ended"]
    assert server.waits == ["10.0"] * 3
