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
    lineage: tuple[str, int] | None = None  # a trained model's checkpoint: (model id, step)

    def supersedes(self, other: tuple[str, int] | None) -> bool:
        """Whether this checkpoint is a later step of the model ``other`` is a checkpoint of."""
        return (
            self.lineage is not None
            and other is not None
            and (other[0] == self.lineage[0] and other[1] < self.lineage[1])
        )


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
    # progress, read by the server's watchdog: events sent by the engine thread, and taken by the
    # consumer on the event loop, with the time of the latest (monotonic seconds)
    emitted: int = 0
    emitted_at: float | None = None
    received: int = 0
    received_at: float | None = None
    stepped_at: float | None = None  # the latest engine step that sampled a token of it

    def progressed(self, now: float) -> None:
        """The engine sampled a token of it (a non-streamed request sends no event until the end)."""
        self.stepped_at = now

    def emit(self, event: Event) -> None:
        if not self.cancelled:
            self.emitted += 1
            self.emitted_at = time.monotonic()
            self.sink(event)

    def took(self) -> None:
        """The consumer took one event off its queue."""
        self.received += 1
        self.received_at = time.monotonic()

    @property
    def progressed_at(self) -> float:
        """When it last made progress: arrival, its latest token, or its latest event sent or taken."""
        return max(self.arrival, self.emitted_at or 0.0, self.received_at or 0.0, self.stepped_at or 0.0)
