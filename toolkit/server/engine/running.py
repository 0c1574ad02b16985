"""What the engine holds for each running choice: a :class:`Sequence` (its tokens, sampling state and
text so far, and what each sampled token does to them: stop tokens and strings, streamed deltas, the
final event) and, per runner, a :class:`Batch` (its sequences, sequence ``i`` in cache slot ``i``)."""

from __future__ import annotations

import torch
from torch import Tensor

from .codec import Codec, IncrementalText
from .events import Delta, Finished, TopLogprobs
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
        self.codec = codec
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

    def append(self, token: int, max_model_len: int) -> bool:
        """Add a sampled token; True if the sequence is now finished."""
        p = self.params
        self.output_ids.append(token)
        if self.guide is not None:
            self.guide.advance(token)
        n = len(self.output_ids)
        stopped_by_token = False
        if n >= p.min_tokens:
            if token in self.eos:
                self.finish_reason, stopped_by_token = "stop", True
            elif token in self.extra_eos or token in p.stop_token_ids:
                self.finish_reason, self.stop_reason, stopped_by_token = "stop", token, True
        if self.text_state is not None and (not stopped_by_token or p.include_stop_str_in_output):
            new_text = self.text_state.push(token)
            self.text += new_text
            if p.stop and new_text and n > p.min_tokens and not stopped_by_token:
                self._check_stop_strings(len(new_text))
        if self.finish_reason is None and (n >= p.max_tokens or len(self.prompt_ids) + n >= max_model_len):
            self.finish_reason = "length"
        return self.finish_reason is not None

    def _check_stop_strings(self, new_chars: int) -> None:
        """Finish at the stop string completed by the newest text (earliest end, then list order)."""
        p = self.params
        window_start = max(0, len(self.text) - new_chars - max(len(s) for s in p.stop) + 1)
        found = [
            (at + len(stop), order, at, stop)
            for order, stop in enumerate(p.stop)
            if (at := self.text.find(stop, window_start)) >= 0
        ]
        best = min(found) if found else None
        if best is not None:
            _, _, at, stop = best
            self.text = self.text[: at + len(stop)] if p.include_stop_str_in_output else self.text[:at]
            self.finish_reason, self.stop_reason = "stop", stop

    def delta(self, final: bool = False) -> Delta:
        """The new tokens and text since the last delta (text held back while a stop string may still
        match, unless ``final``)."""
        hold = 0 if final or not self.params.stop else max(len(s) for s in self.params.stop) - 1
        upto = max(self.sent_chars, len(self.text) - hold)
        delta = Delta(
            self.index,
            self.output_ids[self.sent_tokens :],
            self.text[self.sent_chars : upto],
            self.logprobs[self.sent_logprobs :] if self.logprobs is not None else [],
        )
        self.sent_chars, self.sent_tokens = upto, len(self.output_ids)
        self.sent_logprobs = len(self.logprobs) if self.logprobs is not None else 0
        return delta

    def finished(self) -> Finished:
        """The event of the finished sequence: its whole text, and the last delta when it streams."""
        p = self.params
        if self.text_state is not None:
            if self.stop_reason is None or not isinstance(self.stop_reason, str):
                self.text += self.text_state.flush()
        else:
            ids = self.output_ids
            if self.finish_reason == "stop" and not p.include_stop_str_in_output:
                ids = ids[:-1]
            self.text = self.codec.decode(ids, p.skip_special_tokens, p.spaces_between_special_tokens)
        tail = self.delta(final=True) if self.req.stream else None
        return Finished(
            self.index,
            self.output_ids,
            self.text,
            self.logprobs,
            self.finish_reason or "stop",
            self.stop_reason,
            tail,
        )


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
