"""The agent loop at unit level, against a scripted chat (no server): turns, tool execution, errors
as tool messages, limits and timeouts, the trajectory's shape, and the sync and async drivers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from support.agent_support import (
    AsyncScriptedChat,
    Faulty,
    Lookup,
    Reply,
    ScriptedChat,
    call_then_answer,
    completion,
    faulty_calls,
)
from toolkit.client._observe import observe
from toolkit.rollouts import Agent, AsyncAgent, RolloutTimeout, policy_version
from toolkit.types.chat import ChatCompletion
from toolkit.types.training import Choice, Trajectory


def test_an_episode_calls_tools_and_keeps_every_turn_trainable() -> None:
    chat = ScriptedChat(call_then_answer)
    agent = Agent(chat, "lookup:step3", Lookup, temperature=1.0, max_tokens=40)  # type: ignore[arg-type]
    made = agent.rollout("abc")

    items = made.messages_and_choices
    assert [type(i).__name__ for i in items] == [
        "ChatMessage",
        "ChatMessage",
        "Choice",
        "ChatMessage",
        "ChatMessage",
        "Choice",
    ]
    first, answer = items[2], items[5]
    assert isinstance(first, Choice) and isinstance(answer, Choice)
    assert [c.function.name for c in first.message.tool_calls or []] == ["get", "shout"]
    assert first.token_ids and first.logprobs and first.prompt_token_ids == [1, 2, 0]
    assert answer.message.content == "417" and answer.prompt_token_ids == [1, 2, 1]
    assert [m.model_dump(exclude_none=True) for m in items[3:5]] == [
        {"role": "tool", "content": "417", "tool_call_id": "call_0_0"},
        {"role": "tool", "content": "HI", "tool_call_id": "call_0_1"},
    ]
    assert made.reward == 1.0
    assert made.metrics == {
        "turns": 2,
        "tool_calls": 2,
        "tool_errors": 0,
        "tool_timeouts": 0,
        "answered": True,
        "correct": True,
    }
    assert [t.function.name for t in made.tools or []] == ["get", "shout"]
    assert made.initial_policy_version == made.final_policy_version == 3
    assert made.metadata == {"model": "lookup:step3"}

    first_request, second_request = chat.requests
    assert first_request["model"] == "lookup:step3" and first_request["temperature"] == 1.0
    assert first_request["logprobs"] is True and first_request["return_token_ids"] is True
    assert first_request["tool_choice"] == "auto" and "parallel_tool_calls" not in first_request
    assert first_request["tools"][0] == {
        "type": "function",
        "function": {
            "name": "get",
            "description": "The code of a key.",
            "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
        },
    }
    assert first_request["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "code abc"},
    ]
    history = second_request["messages"]
    assert history[2] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_0_0",
                "type": "function",
                "function": {"name": "get", "arguments": '{"key": "abc"}'},
            },
            {
                "id": "call_0_1",
                "type": "function",
                "function": {"name": "shout", "arguments": '{"text": "hi"}'},
            },
        ],
    }
    assert history[3:] == [
        {"role": "tool", "content": "417", "tool_call_id": "call_0_0"},
        {"role": "tool", "content": "HI", "tool_call_id": "call_0_1"},
    ]
    assert Trajectory.model_validate_json(made.model_dump_json()) == made  # the wire round trip


def test_tool_failures_become_tool_messages_and_metrics() -> None:
    agent = Agent(ScriptedChat(faulty_calls), "m", Faulty, tool_timeout=0.3)  # type: ignore[arg-type]
    made = agent.rollout("xyz")
    results = [i.content for i in made.messages_and_choices if not isinstance(i, Choice) and i.role == "tool"]
    assert results == [
        "error: ValueError: the database is down",
        "error: unknown tool 'nope' (known: get, boom, slow)",
        "error: the arguments are not valid JSON (Expecting value)",
        "error: invalid arguments: key: Input should be a valid string",
        "error: slow did not answer within 0.3 s",
        "093",
    ]
    assert made.metrics["tool_calls"] == 6 and made.metrics["tool_errors"] == 5
    assert made.metrics["tool_timeouts"] == 1 and made.reward == 1.0


def test_max_turns_ends_an_episode_that_keeps_calling() -> None:
    def always_call(messages: list[dict[str, Any]]) -> Reply:
        return {"calls": [("get", '{"key": "abc"}')]}

    made = Agent(ScriptedChat(always_call), "m", Lookup, max_turns=3).rollout("abc")  # type: ignore[arg-type]
    assert sum(isinstance(i, Choice) for i in made.messages_and_choices) == 3
    assert made.metrics["turns"] == 3 and made.metrics["answered"] is False and made.reward == 0.0
    assert made.initial_policy_version is None  # the name pins no step
    assert policy_version("wandb-artifact:///me/p/agent:step12") == 12 and policy_version("agent") is None
    with pytest.raises(ValueError, match="max_turns must be at least 1"):
        Agent(ScriptedChat(always_call), "m", Lookup, max_turns=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="leave out n and stream"):
        Agent(ScriptedChat(always_call), "m", Lookup, n=2)  # type: ignore[arg-type]


class BrokenReset(Lookup):
    def reset(self, scenario: str) -> list[dict[str, Any]]:
        if scenario == "bad":
            raise KeyError(scenario)
        return super().reset(scenario)


def test_gather_groups_episodes_and_records_failed_rollouts() -> None:
    agent = Agent(ScriptedChat(call_then_answer, delay=0.01), "m", BrokenReset)  # type: ignore[arg-type]
    groups = agent.gather(["abc", "bad", "xyz"], group_size=3, max_concurrency=4, progress=False)
    assert [len(g.trajectories) for g in groups] == [3, 0, 3]
    assert [len(g.exceptions) for g in groups] == [0, 3, 0]
    assert groups[1].exceptions[0].type == "<class 'KeyError'>"
    assert [t.reward for g in groups for t in g.trajectories] == [1.0] * 6


SLOW = 5.0  # seconds the second model call takes


class SlowSecondAnswer(ScriptedChat):
    """Answers a conversation's first turn at once and its second after ``SLOW`` s; counts the
    answers it gave."""

    def __init__(self) -> None:
        super().__init__(call_then_answer)
        self.answered = 0

    def create(self, **request: Any) -> ChatCompletion:
        turn = sum(1 for m in request["messages"] if m["role"] == "assistant")

        def answer() -> ChatCompletion:
            time.sleep(SLOW if turn else 0.0)
            with self.lock:
                self.answered += 1
            return completion(self.script(request["messages"]), turn)

        return observe(request, answer)


def test_a_rollout_past_its_timeout_fails_alone() -> None:
    """The rollout's 0.6 s cut its second model call: it failed while that call had not answered,
    long before the call's end (the bound leaves seconds for a busy machine)."""
    chat = SlowSecondAnswer()
    slow = Agent(chat, "m", Lookup, timeout=0.6)  # type: ignore[arg-type]
    started = time.monotonic()
    with pytest.raises(RolloutTimeout, match=r"^the rollout took longer than 0.6 s$"):
        slow.rollout("abc")
    assert chat.answered == 1  # the second answer never came
    assert time.monotonic() - started < SLOW - 1
    groups = slow.gather(["abc"], group_size=2, progress=False, raise_on_all_failed=False)
    assert groups[0].trajectories == [] and "RolloutTimeout" in groups[0].exceptions[0].type
    assert len(groups[0].exceptions) == 2


class Slow(Lookup):
    def tools(self) -> Sequence[Callable[..., Any]]:
        return [self.get, self.slow]

    def slow(self) -> str:
        time.sleep(1)
        return "late"


def test_a_tool_cut_short_by_the_rollout_timeout_fails_the_rollout() -> None:
    def call_slow(messages: list[dict[str, Any]]) -> Reply:
        return {"calls": [("slow", "{}")]}

    agent = Agent(ScriptedChat(call_slow), "m", Slow, tool_timeout=5, timeout=0.3)  # type: ignore[arg-type]
    with pytest.raises(RolloutTimeout):
        agent.rollout("abc")


async def test_the_async_agent_runs_the_same_episode() -> None:
    chat = AsyncScriptedChat(call_then_answer, delay=0.01)
    agent = AsyncAgent(chat, "lookup:step1", Lookup, max_tokens=40)  # type: ignore[arg-type]
    made = await agent.rollout("xyz")
    assert made.reward == 1.0 and made.metrics["tool_calls"] == 2 and made.initial_policy_version == 1
    tool_messages = [
        i.content for i in made.messages_and_choices if not isinstance(i, Choice) and i.role == "tool"
    ]
    assert tool_messages == ["093", "HI"]
    groups = await agent.gather(["abc", "xyz"], group_size=4, max_concurrency=8, progress=False)
    assert [t.reward for g in groups for t in g.trajectories] == [1.0] * 8


async def test_async_tool_errors_and_timeouts() -> None:
    agent = AsyncAgent(AsyncScriptedChat(faulty_calls), "m", Faulty, tool_timeout=0.3)  # type: ignore[arg-type]
    made = await agent.rollout("xyz")
    assert made.metrics["tool_errors"] == 5 and made.metrics["tool_timeouts"] == 1 and made.reward == 1.0
    slow = AsyncAgent(AsyncScriptedChat(call_then_answer, delay=0.4), "m", Lookup, timeout=0.6)  # type: ignore[arg-type]
    with pytest.raises(RolloutTimeout):
        await slow.rollout("abc")


async def test_the_sync_agent_runs_async_tools_inside_a_running_event_loop() -> None:
    """In Jupyter an event loop runs in the kernel thread: a sync rollout still awaits its async tools."""
    asyncio.get_running_loop()  # this test body runs inside one
    made = Agent(ScriptedChat(call_then_answer), "m", Lookup).rollout("abc")  # type: ignore[arg-type]
    assert [
        i.content for i in made.messages_and_choices if not isinstance(i, Choice) and i.role == "tool"
    ] == [
        "417",
        "HI",
    ]
