"""What the engine is asked to do: a request (its prompt, weights and per-choice settings) and the
weights it runs on. The scheduler (:mod:`.engine`) and beam search (:mod:`.beam`) both read it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .events import Event
from .sampling import SamplingParams
from .structured import GuidedRow


@dataclass(frozen=True)
class Weights:
    """Which weights serve a request: the base model's, or a checkpoint folder's."""

    key: str  # "base" or a checkpoint id
    folder: Path | None = None


@dataclass(frozen=True)
class BeamParams:
    """``use_beam_search``: ``width`` beams, scored ``cum_logprob / len ** length_penalty``."""

    width: int
    length_penalty: float = 1.0


@dataclass
class Request:
    """One chat completion in engine terms (``n`` sequences sharing one prompt)."""

    id: str
    weights: Weights
    prompt_ids: list[int]
    params: list[SamplingParams]  # one per choice
    guides: list[GuidedRow | None]
    stream: bool
    priority: int = 0
    cache_scope: str | None = None  # None: no prefix-cache sharing
    prompt_logprobs: int | None = None
    beam: BeamParams | None = None
    arrival: float = field(default_factory=time.monotonic)
    sink: Callable[[Event], None] = lambda event: None
    cancelled: bool = False

    def emit(self, event: Event) -> None:
        if not self.cancelled:
            self.sink(event)
