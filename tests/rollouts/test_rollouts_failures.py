"""Gathers whose rollouts fail, over the real local server: all failed raises :class:`GatherError`
with the first exception's message (a model name the server does not serve, a tool without type
hints), some failed warns in one line, ``raise_on_all_failed=False`` keeps the groups."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import pytest

import toolkit as tk
from conftest import LocalServer
from toolkit.client import NotFoundError
from toolkit.rollouts import Agent, AsyncAgent, GatherError, GatherWarning, gather, gather_async
from toolkit.tasks import lookup, reverse

BASE = "toolkit/tiny-chat-1m"
MISSING = "no-such-model-anywhere"


class Untyped(lookup.CodeLookup):
    def tools(self) -> Sequence[Callable[..., Any]]:
        def get(key):  # type: ignore[no-untyped-def]  # the mistake under test
            return "123"

        return [get]


def test_a_gather_of_an_unknown_model_raises_with_the_servers_404(server: LocalServer) -> None:
    rollout = reverse.rollout(server.client(), MISSING)
    with pytest.raises(GatherError) as raised:
        gather(["cat", "dog"], rollout, group_size=2, progress=False)
    message = str(raised.value)
    assert message.startswith("all 4 rollouts failed; the first: NotFoundError: ")
    assert MISSING in message and BASE in message  # the 404 names the served models
    assert "\n" not in message
    assert isinstance(raised.value.__cause__, NotFoundError)
    assert len(raised.value.exceptions) == 4
    assert all(isinstance(e, NotFoundError) for e in raised.value.exceptions)
    assert tk.GatherError is GatherError and tk.GatherWarning is GatherWarning


def test_an_agent_with_a_tool_without_type_hints_raises(server: LocalServer) -> None:
    agent = Agent(server.client(), BASE, Untyped, max_tokens=8)
    with pytest.raises(GatherError, match=r"^all 3 rollouts failed; the first: TypeError: tool get: "):
        agent.gather(lookup.scenarios(3, seed=0), progress=False)


async def test_the_async_agent_raises_too(server: LocalServer) -> None:
    async with server.async_client() as client:
        agent = AsyncAgent(client, MISSING, lookup.CodeLookup, max_tokens=8)
        with pytest.raises(GatherError, match=r"^all 2 rollouts failed; the first: NotFoundError: "):
            await agent.gather(lookup.scenarios(2, seed=0), progress=False)
        with pytest.raises(GatherError, match=r"^all 2 rollouts failed"):
            await gather_async(["cat", "dog"], reverse.async_rollout(client, MISSING), progress=False)


def test_raise_on_all_failed_false_keeps_the_groups(server: LocalServer) -> None:
    agent = Agent(server.client(), MISSING, lookup.CodeLookup, max_tokens=8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        groups = agent.gather(
            lookup.scenarios(2, seed=0), group_size=2, progress=False, raise_on_all_failed=False
        )
    assert [len(g.trajectories) for g in groups] == [0, 0]
    assert [len(g.exceptions) for g in groups] == [2, 2]
    assert groups[0].exceptions[0].type == f"<class '{NotFoundError.__module__}.NotFoundError'>"
    assert [str(w.message) for w in caught if w.category is GatherWarning] == [
        f"4 of 4 rollouts failed; the first: {groups[0].exceptions[0].type.split('.')[-1][:-2]}: "
        + groups[0].exceptions[0].message.strip().splitlines()[0]
    ]


def test_some_failed_warns_once_at_the_callers_line(server: LocalServer) -> None:
    good = reverse.rollout(server.client(), BASE)

    def rollout(word: str) -> Any:
        if word == "bad":
            raise ValueError("no word\nsecond line")
        return good(word)

    with pytest.warns(GatherWarning) as caught:
        groups = gather(["cat", "bad", "dog"], rollout, group_size=2, progress=False)
    assert [len(g.trajectories) for g in groups] == [2, 0, 2]
    # only the gather's own: a ResourceWarning of another test's client, collected meanwhile, is not
    gathered = [w for w in caught if issubclass(w.category, GatherWarning)]
    assert [str(w.message) for w in gathered] == ["2 of 6 rollouts failed; the first: ValueError: no word"]
    assert gathered[0].filename == __file__  # the user's line, not the toolkit's


def test_an_agent_warning_points_at_the_users_line(server: LocalServer) -> None:
    class SomeUntyped(lookup.CodeLookup):
        def tools(self) -> Sequence[Callable[..., Any]]:
            return Untyped().tools() if self.scenario.key == bad.key else super().tools()

    bad, other = lookup.scenarios(2, seed=3)
    agent = Agent(server.client(), BASE, SomeUntyped, max_tokens=8)
    with pytest.warns(GatherWarning, match=r"^1 of 2 rollouts failed; the first: TypeError: ") as caught:
        groups = agent.gather([bad, other], progress=False)
    assert [len(g.exceptions) for g in groups] == [1, 0]
    assert [w.filename for w in caught if w.category is GatherWarning] == [__file__]
