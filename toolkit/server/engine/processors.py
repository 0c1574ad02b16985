"""Logits processors a request may name (``logits_processors``). Only these: nothing is ever imported.

A request gives a name, or ``{"qualname": name, "args": [...], "kwargs": {...}}`` passed to the factory.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from .sampling import LogitsProcessor


def no_repeat_ngram(size: int = 3) -> LogitsProcessor:
    """Ban any token that would repeat an n-gram of ``size`` tokens already in the output."""
    if not isinstance(size, int) or size < 1:
        raise ValueError("size must be a positive integer")

    def apply(output: list[int], logits: Tensor) -> Tensor:
        if len(output) < size - 1:
            return logits
        head = output[len(output) - size + 1 :] if size > 1 else []
        for i in range(len(output) - size + 1):
            if output[i : i + size - 1] == head:
                logits[output[i + size - 1]] = -float("inf")
        return logits

    return apply


def ban_tokens(token_ids: list[int]) -> LogitsProcessor:
    """Never produce any of ``token_ids``."""
    banned = [int(t) for t in token_ids]

    def apply(output: list[int], logits: Tensor) -> Tensor:
        logits[banned] = -float("inf")
        return logits

    return apply


REGISTRY: dict[str, Callable[..., LogitsProcessor]] = {
    "no_repeat_ngram": no_repeat_ngram,
    "ban_tokens": ban_tokens,
}


def build(
    name: str, args: list[Any] | None, kwargs: dict[str, Any] | None, vocab_size: int
) -> LogitsProcessor:
    """The processor registered as ``name``, tried once on a blank row of ``vocab_size`` logits.

    KeyError if unknown; TypeError, ValueError or IndexError on bad arguments.
    """
    processor = REGISTRY[name](*(args or []), **(kwargs or {}))
    processor([], torch.zeros(vocab_size, dtype=torch.float32))
    return processor
