"""What the engine holds for each running choice: a :class:`Sequence` (its tokens, block table,
sampling state and text so far) and, per runner, a :class:`Batch` (its running sequences)."""

from __future__ import annotations

import itertools

import torch
from torch import Tensor

from .codec import Codec, IncrementalText
from .events import TopLogprobs
from .kv_pool import KVPool
from .request import Request
from .weights import Route, WeightsPool

_admissions = itertools.count()


class Sequence:
    """One choice being generated; satisfies :class:`~.sampling.RowState`."""

    def __init__(self, req: Request, index: int, route: Route, codec: Codec, eos: list[int]) -> None:
        p = req.params[index]
        self.req, self.index, self.route, self.params = req, index, route, p
        self.order = next(_admissions)  # admission order: the latest admitted is preempted first
        self.blocks: list[int] = []  # the KV pool blocks of its positions
        self.prompt_ids = req.prompt_ids
        self.output_ids: list[int] = []
        self.generator: torch.Generator | None = None
        if p.seed is not None:
            self.generator = torch.Generator().manual_seed(p.seed % 2**64)
        self.guide = req.guides[index]
        self.eos = frozenset() if p.ignore_eos else frozenset(eos[:1])
        self.extra_eos = frozenset() if p.ignore_eos else frozenset(eos[1:])
        self.stop_ids = self.eos | self.extra_eos | frozenset(p.stop_token_ids)
        self.text_state: IncrementalText | None = None
        if req.stream or p.stop:
            self.text_state = IncrementalText(codec, p.skip_special_tokens, p.spaces_between_special_tokens)
        self.text = ""
        self.sent_chars = 0
        self.sent_tokens = 0
        self.sent_logprobs = 0
        self.logprobs: list[tuple[float, TopLogprobs]] | None = [] if p.logprobs is not None else None
        self.finish_reason: str | None = None
        self.stop_reason: int | str | None = None

    @property
    def grammar_mask(self) -> Tensor | None:
        return self.guide.mask() if self.guide is not None else None

    @property
    def cached_len(self) -> int:
        """Tokens whose keys/values are in the cache (all but the last sampled one)."""
        return len(self.prompt_ids) + max(len(self.output_ids) - 1, 0)

    @property
    def cached_ids(self) -> list[int]:
        """The tokens of those keys/values: what a preempted sequence runs again to resume."""
        return self.prompt_ids + self.output_ids[:-1]


class Batch:
    """The running sequences of one runner, their keys and values in ``kv``."""

    def __init__(self, route: Route, pool: WeightsPool, kv: KVPool) -> None:
        self.runner, self.pool, self.kv = route.runner, pool, kv
        self.seqs: list[Sequence] = []

    def remove(self, seq: Sequence, *, keep_route: bool = False) -> None:
        """``seq`` leaves: its blocks go back to the pool, and its route's user too unless
        ``keep_route`` (a preempted sequence, which resumes on the same route)."""
        self.seqs.remove(seq)
        self.kv.release(seq.blocks)
        if not keep_route:
            self.pool.release(seq.route)
