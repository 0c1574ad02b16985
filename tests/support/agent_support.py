"""Support for agent-loop tests: a scripted chat standing in for ``client.chat.completions`` (it goes
through the client's completion observer, so tracing sees its calls) and a small lookup environment."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from toolkit.client._observe import aobserve, observe
from toolkit.rollouts import Environment
from toolkit.types.chat import ChatCompletion
from toolkit.types.training import Choice, Trajectory

Reply = dict[str, Any]  # {"content": ..., "calls": [(name, arguments)]}


def completion(reply: Reply, turn: int) -> ChatCompletion:
    """A completion as the server answers it, with logprobs and token ids (one per character)."""
    calls = [
        {"id": f"call_{turn}_{i}", "type": "function", "function": {"name": name, "arguments": args}}
        for i, (name, args) in enumerate(reply.get("calls", []))
    ]
    text = (reply.get("content") or "") + "".join(
        f"<tool_call>{a}</tool_call>" for _, a in reply.get("calls", [])
    )
    message: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
    if calls:
        message["tool_calls"] = calls
    return ChatCompletion.model_validate(
        {
            "id": f"chatcmpl-{turn}",
            "created": 0,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if calls else "stop",
                    "logprobs": {"content": [{"token": c, "logprob": -0.5} for c in text]},
                    "token_ids": [ord(c) % 256 for c in text],
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": len(text), "total_tokens": 1 + len(text)},
            "prompt_token_ids": [1, 2, turn],
        }
    )


class ScriptedChat:
    """Stands in for ``client.chat.completions``: answers turn ``i`` of each conversation with
    ``script(messages)`` and records every request."""

    def __init__(self, script: Callable[[list[dict[str, Any]]], Reply], delay: float = 0.0) -> None:
        self.script = script
        self.delay = delay
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.chat = self
        self.completions = self

    def create(self, **request: Any) -> ChatCompletion:
        with self.lock:
            self.requests.append(request)

        def answer() -> ChatCompletion:
            time.sleep(self.delay)
            return completion(self.script(request["messages"]), _turn(request))

        return observe(request, answer)


class AsyncScriptedChat(ScriptedChat):
    async def create(self, **request: Any) -> ChatCompletion:  # type: ignore[override]
        self.requests.append(request)

        async def answer() -> ChatCompletion:
            await asyncio.sleep(self.delay)
            return completion(self.script(request["messages"]), _turn(request))

        return await aobserve(request, answer())


def _turn(request: dict[str, Any]) -> int:
    return sum(1 for m in request["messages"] if m["role"] == "assistant")


CODES = {"abc": "417", "xyz": "093"}


class Lookup(Environment[str]):
    """Ask for the code of a key; the tool knows it."""

    def reset(self, scenario: str) -> list[dict[str, Any]]:
        self.key = scenario
        return [{"role": "system", "content": "be brief"}, {"role": "user", "content": f"code {scenario}"}]

    def tools(self) -> Sequence[Callable[..., Any]]:
        return [self.get, shout]

    def get(self, key: str) -> str:
        """The code of a key."""
        return CODES[key]

    def reward(self, trajectory: Trajectory) -> float:
        last = trajectory.messages_and_choices[-1]
        answer = last.message.content if isinstance(last, Choice) else None
        trajectory.metrics["correct"] = answer == CODES[self.key]
        return 1.0 if answer == CODES[self.key] else 0.0


async def shout(text: str) -> str:
    """Upper-case a text (an async tool)."""
    await asyncio.sleep(0)
    return text.upper()


def call_then_answer(messages: list[dict[str, Any]]) -> Reply:
    """Turn 1 calls both tools; turn 2 answers with the first tool's result."""
    results = [m["content"] for m in messages if m["role"] == "tool"]
    if not results:
        key = messages[-1]["content"].split()[-1]
        return {"calls": [("get", json.dumps({"key": key})), ("shout", '{"text": "hi"}')]}
    return {"content": results[0]}


class Faulty(Lookup):
    def tools(self) -> Sequence[Callable[..., Any]]:
        return [self.get, self.boom, self.slow]

    def boom(self) -> str:
        raise ValueError("the database is down")

    def slow(self) -> str:
        time.sleep(5)
        return "late"


def faulty_calls(messages: list[dict[str, Any]]) -> Reply:
    if not any(m["role"] == "tool" for m in messages):
        return {
            "calls": [
                ("boom", "{}"),
                ("nope", "{}"),
                ("get", '{"key": '),
                ("get", '{"key": 3}'),
                ("slow", "{}"),
                ("get", '{"key": "xyz"}'),
            ]
        }
    return {"content": "093"}
