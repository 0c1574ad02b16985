"""What the engine reports about a request, from its scheduler thread to the event loop."""

from __future__ import annotations

from dataclasses import dataclass

TopLogprobs = list[tuple[int, float]]


@dataclass
class PromptLogprob:
    token_id: int
    logprob: float
    rank: int
    top: TopLogprobs


@dataclass
class Started:
    cached_tokens: int
    prompt_logprobs: list[PromptLogprob] | None


@dataclass
class Delta:
    index: int
    token_ids: list[int]
    text: str
    logprobs: list[tuple[float, TopLogprobs]]


@dataclass
class Finished:
    index: int
    token_ids: list[int]
    text: str
    logprobs: list[tuple[float, TopLogprobs]] | None
    finish_reason: str
    stop_reason: int | str | None
    tail: Delta | None  # the last stream delta, for streams
    last: bool = False  # no choice follows, even if fewer than asked finished (beams that ran out)


@dataclass
class Failed:
    error: BaseException


Event = Started | Delta | Finished | Failed
