"""What the tool-using tasks share (lookup.py and suite.py): an :class:`AgentTask` that draws scenarios
with a held-out split, writes SFT demonstrations, runs episodes and measures held-out success; and the
pieces of their rewards and demonstrations (the final answer, the tools' results, a call turn)."""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .. import seeding
from ..client import Client
from ..rollouts import Agent, Environment
from ..types.training import Choice, Trajectory

S = TypeVar("S")


def held_out(task: str, key: str) -> bool:
    """Whether ``key`` belongs to ``task``'s held-out split (one key in ten)."""
    return zlib.crc32(f"{task}:{key}".encode()) % 10 == 0


def answer(trajectory: Trajectory) -> str | None:
    """The final answer: the content of the last turn when it ended without a tool call, else None."""
    last = trajectory.messages_and_choices[-1] if trajectory.messages_and_choices else None
    if not isinstance(last, Choice) or last.finish_reason != "stop" or last.message.tool_calls:
        return None
    return last.message.content


def tool_results(trajectory: Trajectory) -> list[str]:
    """The text of every ``tool`` message of an episode, in order."""
    return [
        m.content
        for m in trajectory.messages_and_choices
        if not isinstance(m, Choice) and m.role == "tool" and isinstance(m.content, str)
    ]


def score(trajectory: Trajectory, *, called: bool, correct: bool) -> float:
    """1 when the episode got what it needed from its tools and answered right, else 0; both recorded
    as metrics."""
    trajectory.metrics["called"] = called
    trajectory.metrics["correct"] = correct
    return 1.0 if called and correct else 0.0


def conversation(
    opening: list[dict[str, Any]], calls: Sequence[tuple[str, str, str]], final: str, tools: Sequence[Any]
) -> dict[str, Any]:
    """A ``train.jsonl`` record: ``opening``, then one turn per ``(tool, arguments JSON, result)`` (the
    call and the tool's result), then the answer ``final``, listing ``tools`` (their specs)."""
    messages = list(opening)
    for i, (name, arguments, result) in enumerate(calls):
        call = {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": arguments}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": result})
    messages.append({"role": "assistant", "content": final})
    return {"messages": messages, "tools": [t.model_dump(mode="json", exclude_none=True) for t in tools]}


@dataclass(frozen=True)
class AgentTask(Generic[S]):
    """A tool-using task: ``draw`` makes one scenario of a split (``"train"`` or ``"eval"``) from a
    random generator, ``environment`` plays it, ``demonstration`` writes its supervised example;
    episodes get ``max_turns`` turns of at most ``max_tokens`` tokens each."""

    name: str
    draw: Callable[[random.Random, str], S]
    environment: Callable[[], Environment[S]]
    demonstration: Callable[[S], dict[str, Any]]
    max_tokens: int
    max_turns: int

    def scenarios(self, n: int, seed: int | None = None, *, split: str = "train") -> list[S]:
        """``n`` scenarios of the train (or ``"eval"``) split, drawn from ``seed`` (without one, from
        the open experiment's seed, else at random)."""
        rng = seeding.rng(seed, "scenarios")
        return [self.draw(rng, split) for _ in range(n)]

    def demonstrations(self, n: int, seed: int | None = None) -> list[dict[str, Any]]:
        """``n`` supervised examples of training scenarios, for the SFT warm start."""
        return [self.demonstration(s) for s in self.scenarios(n, seed)]

    def agent(self, client: Client, model: str, *, temperature: float = 1.0, **options: Any) -> Agent[S]:
        """An :class:`~toolkit.rollouts.Agent` playing this task with ``model``."""
        return Agent(
            client,
            model,
            self.environment,
            max_turns=self.max_turns,
            temperature=temperature,
            max_tokens=self.max_tokens,
            **options,
        )

    def success(
        self, client: Client, model: str, n: int = 64, *, seed: int | None = None, temperature: float = 1.0
    ) -> float:
        """Held-out success: the mean reward of ``n`` episodes of held-out scenarios. ``seed`` draws the
        scenarios and seeds the episodes' sampling (without one: the open experiment's seed, else the
        scenarios of seed 0, sampled unseeded)."""
        seed = seeding.resolve(seed, "success")
        groups = self.agent(client, model, temperature=temperature).gather(
            self.scenarios(n, 0 if seed is None else seed, split="eval"),
            max_concurrency=32,
            max_exceptions=0,
            progress=False,
            seed=seed,
        )
        rewards = [t.reward for g in groups for t in g.trajectories]
        return sum(rewards) / len(rewards)
