"""Code lookup: a tool-using task the built-in 1M-parameter model learns on 2 CPU cores.

Every episode hides a fresh code (three digits) behind a key (three lowercase letters). The user asks
``code kfz``; only the tool ``get(key)`` knows the code, so the model must call it (turn 1), read the
result and answer with the code (turn 2). Both turns are copies, which a byte-level model learns fast
(short names, no arithmetic). The reward is 1 when the last turn is exactly the code and ends the turn
(``finish_reason == "stop"``: a reward that ignores the end of turn lets RL unlearn it), else 0.
One key in ten is held out for evaluation; codes are drawn per scenario, so nothing can be memorised.

:func:`demonstrations` writes SFT examples (``train.jsonl`` records with the tool) for the warm start;
:func:`agent` runs episodes through the chat endpoint, :func:`success` measures held-out success.
"""

from __future__ import annotations

import itertools
import string
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field

from .. import seeding
from ..client import Client
from ..rollouts import Agent, Environment, tool
from ..types.training import Choice, Trajectory

KEYS = ["".join(letters) for letters in itertools.product(string.ascii_lowercase, repeat=3)]
MAX_TOKENS = 72  # the call is about 64 bytes
MAX_TURNS = 3


def held_out(key: str) -> bool:
    return zlib.crc32(f"lookup:{key}".encode()) % 10 == 0


TRAIN_KEYS = [k for k in KEYS if not held_out(k)]
EVAL_KEYS = [k for k in KEYS if held_out(k)]


@dataclass(frozen=True)
class Scenario:
    """One episode: the key the user asks about and the code the tool knows for it."""

    key: str
    code: str


def scenarios(n: int, seed: int | None = None, *, split: str = "train") -> list[Scenario]:
    """``n`` scenarios of the train (or ``"eval"``) keys, each with a fresh random code (drawn from
    ``seed``; without one, from the open experiment's seed, else at random)."""
    pool = TRAIN_KEYS if split == "train" else EVAL_KEYS
    rng = seeding.rng(seed, "scenarios")
    return [Scenario(rng.choice(pool), f"{rng.randrange(1000):03d}") for _ in range(n)]


class CodeLookup(Environment[Scenario]):
    """The environment of one episode: the user's question, the ``get`` tool, the reward."""

    def reset(self, scenario: Scenario) -> list[dict[str, Any]]:
        self.scenario = scenario
        return prompt(scenario)

    def tools(self) -> Sequence[Callable[..., Any]]:
        return [self.get]

    def get(self, key: Annotated[str, Field(max_length=3)]) -> str:
        """Code of a key."""
        return self.scenario.code if key == self.scenario.key else "no such key"

    def reward(self, trajectory: Trajectory) -> float:
        results = [
            m.content
            for m in trajectory.messages_and_choices
            if not isinstance(m, Choice) and m.role == "tool"
        ]
        called = self.scenario.code in results  # only the right key gets the code
        correct = answer(trajectory) == self.scenario.code
        trajectory.metrics["called"] = called
        trajectory.metrics["correct"] = correct
        return 1.0 if called and correct else 0.0


TOOL = tool(CodeLookup().get).spec  # what each request and each demonstration lists


def answer(trajectory: Trajectory) -> str | None:
    """The final answer: the content of the last turn when it ended without a tool call, else None."""
    last = trajectory.messages_and_choices[-1] if trajectory.messages_and_choices else None
    if not isinstance(last, Choice) or last.finish_reason != "stop" or last.message.tool_calls:
        return None
    return last.message.content


def prompt(scenario: Scenario) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"code {scenario.key}"}]


def demonstration(scenario: Scenario) -> dict[str, Any]:
    """A supervised example (a ``train.jsonl`` record): the call, the tool's result, the answer."""
    call = {
        "id": "call_0",
        "type": "function",
        "function": {"name": TOOL.function.name, "arguments": f'{{"key": "{scenario.key}"}}'},
    }
    return {
        "messages": [
            *prompt(scenario),
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_0", "content": scenario.code},
            {"role": "assistant", "content": scenario.code},
        ],
        "tools": [TOOL.model_dump(mode="json", exclude_none=True)],
    }


def demonstrations(n: int, seed: int | None = None) -> list[dict[str, Any]]:
    """``n`` supervised examples of training keys, for the SFT warm start."""
    return [demonstration(s) for s in scenarios(n, seed)]


def agent(client: Client, model: str, *, temperature: float = 1.0, **options: Any) -> Agent[Scenario]:
    """An :class:`~toolkit.rollouts.Agent` playing code lookup with ``model``."""
    return Agent(
        client,
        model,
        CodeLookup,
        max_turns=MAX_TURNS,
        temperature=temperature,
        max_tokens=MAX_TOKENS,
        **options,
    )


def success(
    client: Client, model: str, n: int = 64, *, seed: int | None = None, temperature: float = 1.0
) -> float:
    """Held-out success: the mean reward of ``n`` episodes of held-out keys. ``seed`` draws the keys
    and seeds the episodes' sampling (without one: the open experiment's seed, else the keys of
    seed 0, sampled unseeded)."""
    seed = seeding.resolve(seed, "success")
    groups = agent(client, model, temperature=temperature).gather(
        scenarios(n, 0 if seed is None else seed, split="eval"),
        max_concurrency=32,
        max_exceptions=0,
        progress=False,
        seed=seed,
    )
    rewards = [t.reward for g in groups for t in g.trajectories]
    return sum(rewards) / len(rewards)
