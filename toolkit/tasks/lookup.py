"""Code lookup: a tool-using task the built-in 1M-parameter model learns on 2 CPU cores.

Every episode hides a fresh code (three digits) behind a key (three lowercase letters). The user asks
``code kfz``; only the tool ``get(key)`` knows the code, so the model must call it (turn 1), read the
result and answer with the code (turn 2). Both turns are copies, which a byte-level model learns fast
(short names, no arithmetic). The reward is 1 when the last turn is exactly the code and ends the turn
(``finish_reason == "stop"``: a reward that ignores the end of turn lets RL unlearn it), else 0.
One key in ten is held out for evaluation; codes are drawn per scenario, so nothing can be memorised.

:func:`demonstrations` writes SFT examples (``train.jsonl`` records with the tool) for the warm start;
:func:`agent` runs episodes through the chat endpoint, :func:`success` measures held-out success (the
methods of :data:`TASK`, an :class:`~toolkit.tasks.agent_task.AgentTask` like those of
:mod:`toolkit.tasks.suite`).
"""

from __future__ import annotations

import itertools
import json
import random
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field

from ..rollouts import Environment, tool
from ..types.training import Trajectory
from .agent_task import AgentTask, answer, conversation, held_out, score, tool_results

KEYS = ["".join(letters) for letters in itertools.product(string.ascii_lowercase, repeat=3)]
MAX_TOKENS = 72  # the call is about 64 bytes
MAX_TURNS = 3
TRAIN_KEYS = [k for k in KEYS if not held_out("lookup", k)]
EVAL_KEYS = [k for k in KEYS if held_out("lookup", k)]


@dataclass(frozen=True)
class Scenario:
    """One episode: the key the user asks about and the code the tool knows for it."""

    key: str
    code: str


def draw(rng: random.Random, split: str) -> Scenario:
    """One scenario of a key of ``split`` with a fresh random code."""
    return Scenario(rng.choice(TRAIN_KEYS if split == "train" else EVAL_KEYS), f"{rng.randrange(1000):03d}")


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
        # only the right key gets the code
        called = self.scenario.code in tool_results(trajectory)
        return score(trajectory, called=called, correct=answer(trajectory) == self.scenario.code)


TOOL = tool(CodeLookup().get).spec  # what each request and each demonstration lists


def prompt(scenario: Scenario) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"code {scenario.key}"}]


def demonstration(scenario: Scenario) -> dict[str, Any]:
    """A supervised example (a ``train.jsonl`` record): the call, the tool's result, the answer."""
    call = (TOOL.function.name, json.dumps({"key": scenario.key}), scenario.code)
    return conversation(prompt(scenario), [call], scenario.code, [TOOL])


TASK = AgentTask("lookup", draw, CodeLookup, demonstration, MAX_TOKENS, MAX_TURNS)
scenarios = TASK.scenarios
demonstrations = TASK.demonstrations
agent = TASK.agent
success = TASK.success
