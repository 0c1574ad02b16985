"""Word reversal: a reward task the built-in 1M-parameter model learns on 2 CPU cores.

The user asks ``reverse cat``; the answer ``tac`` scores 1 only when the model also ends its turn
(``finish_reason == "stop"``), else 0 (spec/rl-on-cpu.md: a reward that ignores the end of turn lets
RL unlearn it). Words are 3 random lowercase letters; one in ten is held out for evaluation.
"""

from __future__ import annotations

import itertools
import string
import zlib
from collections.abc import Awaitable, Callable
from typing import Any

from .. import seeding
from ..client import AsyncClient, Client
from ..rollouts import trajectory
from ..types.training import Trajectory

ALL_WORDS = ["".join(letters) for letters in itertools.product(string.ascii_lowercase, repeat=3)]
MAX_TOKENS = 6


def held_out(word: str) -> bool:
    return zlib.crc32(word.encode()) % 10 == 0


TRAIN_WORDS = [w for w in ALL_WORDS if not held_out(w)]
EVAL_WORDS = [w for w in ALL_WORDS if held_out(w)]


def sample_words(n: int, seed: int | None = None, *, split: str = "train") -> list[str]:
    """``n`` words of the train (or ``"eval"``) split, drawn with replacement (from ``seed``; without
    one, from the open experiment's seed, else at random)."""
    pool = TRAIN_WORDS if split == "train" else EVAL_WORDS
    rng = seeding.rng(seed, "scenarios")
    return [rng.choice(pool) for _ in range(n)]


def prompt(word: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"reverse {word}"}]


def conversation(word: str) -> list[dict[str, Any]]:
    """A supervised example: the prompt and the right answer."""
    return [*prompt(word), {"role": "assistant", "content": word[::-1]}]


def reward(word: str, content: str | None, finish_reason: str | None) -> float:
    return 1.0 if finish_reason == "stop" and content == word[::-1] else 0.0


def _request(model: str, temperature: float) -> dict[str, Any]:
    return {
        "model": model,
        "temperature": temperature,
        "max_tokens": MAX_TOKENS,
        "logprobs": True,
        "return_token_ids": True,
    }


def rollout(client: Client, model: str, temperature: float = 1.0) -> Callable[[str], Trajectory]:
    """A rollout function for :func:`toolkit.rollouts.gather`: one sampled answer, scored."""

    def run(word: str) -> Trajectory:
        messages = prompt(word)
        completion = client.chat.completions.create(messages=messages, **_request(model, temperature))
        choice = completion.choices[0]
        score = reward(word, choice.message.content, choice.finish_reason)
        return trajectory(messages, completion, reward=score, metadata={"word": word})

    return run


def async_rollout(
    client: AsyncClient, model: str, temperature: float = 1.0
) -> Callable[[str], Awaitable[Trajectory]]:
    """The async twin of :func:`rollout`, for :func:`toolkit.rollouts.gather_async`."""

    async def run(word: str) -> Trajectory:
        messages = prompt(word)
        completion = await client.chat.completions.create(messages=messages, **_request(model, temperature))
        choice = completion.choices[0]
        score = reward(word, choice.message.content, choice.finish_reason)
        return trajectory(messages, completion, reward=score, metadata={"word": word})

    return run
