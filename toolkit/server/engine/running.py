"""What the engine holds for each running choice: a :class:`Sequence` (its tokens, sampling state and
text so far) and, per runner, a :class:`Batch` (its sequences, sequence ``i`` in cache slot ``i``)."""

from __future__ import annotations

import torch
from torch import Tensor

from .codec import Codec, IncrementalText
from .events import TopLogprobs
from .request import Request
from .runner import SlotCache
from .weights import Route, WeightsPool


class Sequence:
    """One choice being generated; satisfies :class:`~.sampling.RowState`."""

    def __init__(
        self, req: Request, index: int, slot: int, route: Route, codec: Codec, eos: list[int]
    ) -> None:
        p = req.params[index]
        self.req, self.index, self.slot, self.route, self.params = req, index, slot, route, p
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


class Batch:
    """The running sequences of one runner: sequence ``i`` lives in cache slot ``i``, of ``cache`` if
    given (a cache of an earlier batch: what its slots hold past each sequence's length is never
    read unmasked, as with a slot a finished sequence left), else of a new one."""

    def __init__(self, route: Route, pool: WeightsPool, cache: SlotCache | None = None) -> None:
        self.runner, self.pool = route.runner, pool
        self.cache: SlotCache = cache or route.runner.new_cache()
        self.seqs: list[Sequence] = []

    def remove(self, seq: Sequence) -> None:
        self.pool.release(seq.route)
        last = self.seqs.pop()
        if last is not seq:
            self.cache.copy_slot(last.slot, seq.slot, min(last.cached_len + 1, self.cache.length))
            last.slot = seq.slot
            self.seqs[seq.slot] = last
