"""Four small tool-using tasks of other shapes than code lookup (toolkit.tasks.lookup), each learnable
by the built-in 1M-parameter model: keys, names and words are three random lowercase letters, codes
three digits, and a fresh answer is drawn for every scenario, so nothing can be memorised. One key (or
name) in ten is held out for evaluation. Each is an :class:`~toolkit.tasks.agent_task.AgentTask`
(``scenarios``, ``demonstrations``, ``agent``, ``success``); :data:`TASKS` names them.

- ``choice``: a choice between three tools. ``room kfz`` asks the ``room`` tool, ``code kfz`` the
  ``code`` tool, ``year kfz`` the ``year`` tool; each knows its own number for the key, so only the
  right tool gives the answer.
- ``words``: an answer longer than the tool's argument. ``name kfz``: ``name(key)`` returns two words
  (``qpa rex``), the answer is both.
- ``chain``: two calls in sequence. ``pin bob``: ``find(name)`` returns the person's key, and only
  ``get(key)`` with that key returns the pin, the answer.
- ``transform``: a result to transform, not copy. ``rev kfz``: ``get(key)`` returns a code (``417``),
  the answer is it reversed (``714``).

Every reward is 1 when the episode got the answer's source from its tools and the last turn is exactly
the answer and ends the turn (``finish_reason == "stop"``), else 0.
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

WORDS = ["".join(letters) for letters in itertools.product(string.ascii_lowercase, repeat=3)]
MAX_TOKENS = 72  # a call is about 60 bytes
Key = Annotated[str, Field(max_length=3)]


def split_words(task: str) -> tuple[list[str], list[str]]:
    """The training and held-out keys of ``task``."""
    held = [held_out(task, w) for w in WORDS]
    return [w for w, h in zip(WORDS, held, strict=True) if not h], [
        w for w, h in zip(WORDS, held, strict=True) if h
    ]


def code(rng: random.Random) -> str:
    return f"{rng.randrange(1000):03d}"


def key_of(rng: random.Random, task: str, split: str) -> str:
    train, held = SPLITS[task]
    return rng.choice(train if split == "train" else held)


def ask(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def arguments(**values: str) -> str:
    return json.dumps(values)


# choice ------------------------------------------------------------------------------------------
KINDS = ("code", "room", "year")


@dataclass(frozen=True)
class Pick:
    """The tool the user asks (one of :data:`KINDS`), the key, and each tool's number for the key."""

    kind: str
    key: str
    numbers: tuple[str, str, str]

    @property
    def number(self) -> str:
        return self.numbers[KINDS.index(self.kind)]


class ChooseTool(Environment[Pick]):
    """``<kind> <key>``: three tools, each with its own number for the key; the answer is the asked one's."""

    def reset(self, scenario: Pick) -> list[dict[str, Any]]:
        self.scenario = scenario
        return ask(f"{scenario.kind} {scenario.key}")

    def tools(self) -> Sequence[Callable[..., Any]]:
        return [self.code, self.room, self.year]

    def _number(self, kind: str, key: str) -> str:
        return self.scenario.numbers[KINDS.index(kind)] if key == self.scenario.key else "no such key"

    def code(self, key: Key) -> str:
        """Code of a key."""
        return self._number("code", key)

    def room(self, key: Key) -> str:
        """Room of a key."""
        return self._number("room", key)

    def year(self, key: Key) -> str:
        """Year of a key."""
        return self._number("year", key)

    def reward(self, trajectory: Trajectory) -> float:
        number = self.scenario.number
        return score(
            trajectory, called=number in tool_results(trajectory), correct=answer(trajectory) == number
        )


CHOICE_TOOLS = [tool(fn).spec for fn in ChooseTool().tools()]


def draw_choice(rng: random.Random, split: str) -> Pick:
    kind, key = rng.choice(KINDS), key_of(rng, "choice", split)
    return Pick(kind, key, (code(rng), code(rng), code(rng)))


def demonstrate_choice(s: Pick) -> dict[str, Any]:
    call = (s.kind, arguments(key=s.key), s.number)
    return conversation(ask(f"{s.kind} {s.key}"), [call], s.number, CHOICE_TOOLS)


# words -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Words:
    """The key the user asks about and the two words the tool knows for it."""

    key: str
    name: str


class NameWords(Environment[Words]):
    """``name <key>``: ``name(key)`` returns two words, the answer is both."""

    def reset(self, scenario: Words) -> list[dict[str, Any]]:
        self.scenario = scenario
        return ask(f"name {scenario.key}")

    def tools(self) -> Sequence[Callable[..., Any]]:
        return [self.name]

    def name(self, key: Key) -> str:
        """Name of a key."""
        return self.scenario.name if key == self.scenario.key else "no such key"

    def reward(self, trajectory: Trajectory) -> float:
        name = self.scenario.name
        return score(trajectory, called=name in tool_results(trajectory), correct=answer(trajectory) == name)


WORDS_TOOLS = [tool(NameWords().name).spec]


def draw_words(rng: random.Random, split: str) -> Words:
    return Words(key_of(rng, "words", split), f"{rng.choice(WORDS)} {rng.choice(WORDS)}")


def demonstrate_words(s: Words) -> dict[str, Any]:
    return conversation(ask(f"name {s.key}"), [("name", arguments(key=s.key), s.name)], s.name, WORDS_TOOLS)


# chain -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Chain:
    """The person the user asks about, their key (known to ``find``) and the pin (known to ``get``)."""

    name: str
    key: str
    pin: str


class FindThenGet(Environment[Chain]):
    """``pin <name>``: ``find(name)`` returns a key, ``get(key)`` with that key the pin, the answer."""

    def reset(self, scenario: Chain) -> list[dict[str, Any]]:
        self.scenario = scenario
        return ask(f"pin {scenario.name}")

    def tools(self) -> Sequence[Callable[..., Any]]:
        return [self.find, self.get]

    def find(self, name: Key) -> str:
        """Key of a name."""
        return self.scenario.key if name == self.scenario.name else "no such name"

    def get(self, key: Key) -> str:
        """Pin of a key."""
        return self.scenario.pin if key == self.scenario.key else "no such key"

    def reward(self, trajectory: Trajectory) -> float:
        pin = self.scenario.pin
        return score(trajectory, called=pin in tool_results(trajectory), correct=answer(trajectory) == pin)


CHAIN_TOOLS = [tool(fn).spec for fn in FindThenGet().tools()]


def draw_chain(rng: random.Random, split: str) -> Chain:
    return Chain(key_of(rng, "chain", split), rng.choice(WORDS), code(rng))


def demonstrate_chain(s: Chain) -> dict[str, Any]:
    calls = [("find", arguments(name=s.name), s.key), ("get", arguments(key=s.key), s.pin)]
    return conversation(ask(f"pin {s.name}"), calls, s.pin, CHAIN_TOOLS)


# transform ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Transform:
    """The key the user asks about and the code the tool knows for it; the answer is the code reversed."""

    key: str
    code: str

    @property
    def reversed(self) -> str:
        return self.code[::-1]


class ReverseCode(Environment[Transform]):
    """``rev <key>``: ``get(key)`` returns a code, the answer is the code reversed."""

    def reset(self, scenario: Transform) -> list[dict[str, Any]]:
        self.scenario = scenario
        return ask(f"rev {scenario.key}")

    def tools(self) -> Sequence[Callable[..., Any]]:
        return [self.get]

    def get(self, key: Key) -> str:
        """Code of a key."""
        return self.scenario.code if key == self.scenario.key else "no such key"

    def reward(self, trajectory: Trajectory) -> float:
        s = self.scenario
        return score(
            trajectory, called=s.code in tool_results(trajectory), correct=answer(trajectory) == s.reversed
        )


TRANSFORM_TOOLS = [tool(ReverseCode().get).spec]


def draw_transform(rng: random.Random, split: str) -> Transform:
    return Transform(key_of(rng, "transform", split), code(rng))


def demonstrate_transform(s: Transform) -> dict[str, Any]:
    return conversation(
        ask(f"rev {s.key}"), [("get", arguments(key=s.key), s.code)], s.reversed, TRANSFORM_TOOLS
    )


SPLITS = {name: split_words(name) for name in ("choice", "words", "chain", "transform")}
CHOICE = AgentTask("choice", draw_choice, ChooseTool, demonstrate_choice, MAX_TOKENS, max_turns=3)
WORDS_TASK = AgentTask("words", draw_words, NameWords, demonstrate_words, MAX_TOKENS, max_turns=3)
CHAIN = AgentTask("chain", draw_chain, FindThenGet, demonstrate_chain, MAX_TOKENS, max_turns=4)
TRANSFORM = AgentTask(
    "transform", draw_transform, ReverseCode, demonstrate_transform, MAX_TOKENS, max_turns=3
)
TASKS: dict[str, AgentTask[Any]] = {t.name: t for t in (CHOICE, WORDS_TASK, CHAIN, TRANSFORM)}
