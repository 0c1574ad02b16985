"""Beam search (``use_beam_search``): ``n`` beams, scored ``cum_logprob / len ** length_penalty``.

Like vLLM's: each step every beam proposes its top ``2n`` tokens; candidates ending in EOS are
complete, the best ``n`` others continue; at the end the best ``n`` of all are returned.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .codec import Codec
from .events import Delta, Finished
from .kv_pool import KVPool
from .request import Request
from .weights import Route


@dataclass
class _Beam:
    tokens: list[int] = field(default_factory=list)
    cum: float = 0.0


class BeamJob:
    """One beam-search request, advanced one token per engine iteration."""

    def __init__(
        self, req: Request, route: Route, codec: Codec, eos: list[int], max_len: int, pool: KVPool
    ) -> None:
        assert req.beam is not None
        self.req, self.route, self.runner, self.codec, self.pool = req, route, route.runner, codec, pool
        self.width = req.beam.width
        self.params = req.params[0]
        self.eos = frozenset() if self.params.ignore_eos else frozenset(eos[:1])
        self.max_steps = min(self.params.max_tokens, max_len - len(req.prompt_ids))
        self.completed: list[_Beam] = []
        self.beams = [_Beam()]
        self.tables: list[list[int]] = [[]]  # each beam's KV blocks
        try:
            if not pool.grow(self.tables[0], len(req.prompt_ids)):
                raise RuntimeError("the KV cache has no room for a prompt admitted to it")
            logits, _ = self.runner.prefill(
                pool, self.tables, [req.prompt_ids], [0], adapters=[route.adapter]
            )
            self._expand(logits.cpu())
        except Exception:
            self.release()
            raise

    def _score(self, beam: _Beam) -> float:
        length = len(self.req.prompt_ids) + len(beam.tokens)
        if beam.tokens and beam.tokens[-1] in self.eos:
            length -= 1
        return beam.cum / (length**self.req.beam.length_penalty if self.req.beam else 1.0)

    def _expand(self, logits: torch.Tensor) -> None:
        logprobs = logits.log_softmax(-1)
        if self.params.allowed_token_ids is not None:
            allowed = torch.zeros(logprobs.shape[-1], dtype=torch.bool)
            allowed[self.params.allowed_token_ids] = True
            logprobs = logprobs.masked_fill(~allowed, -float("inf"))
        values, ids = logprobs.topk(min(2 * self.width, logprobs.shape[-1]), dim=-1)
        candidates: list[tuple[_Beam, int]] = []
        for parent, beam in enumerate(self.beams):
            for lp, token in zip(values[parent].tolist(), ids[parent].tolist(), strict=True):
                if lp == -float("inf"):
                    continue
                new = _Beam([*beam.tokens, token], beam.cum + lp)
                if token in self.eos:
                    self.completed.append(new)
                else:
                    candidates.append((new, parent))
        candidates.sort(key=lambda c: self._score(c[0]), reverse=True)
        kept = candidates[: self.width]
        self.beams = [b for b, _ in kept]
        tables = [self.pool.fork(self.tables[parent]) for _, parent in kept]
        self.release()
        self.tables = tables

    @property
    def blocks_per_step(self) -> int:
        """The most blocks a step may take: one per beam (a new block, or a copy of a shared one)."""
        return len(self.beams)

    def release(self) -> None:
        """Give the beams' blocks back to the pool."""
        for table in self.tables:
            self.pool.release(table)
        self.tables = []

    def step(self) -> bool:
        """Advance every live beam by one token; True once finished (then :meth:`finish` emits)."""
        if self.beams and len(self.beams[0].tokens) < self.max_steps:
            position = len(self.req.prompt_ids) + len(self.beams[0].tokens) - 1
            if not all(self.pool.writable(table, position) for table in self.tables):
                raise RuntimeError("the KV cache has no room for the next step of a beam search")
            logits = self.runner.decode(
                self.pool,
                self.tables,
                [b.tokens[-1] for b in self.beams],
                [position] * len(self.beams),
                [self.route.adapter] * len(self.beams),
            )
            self._expand(logits.cpu())
            return False
        return True

    def finish(self) -> None:
        """Emit the best ``width`` beams' results."""
        best = sorted(self.completed + self.beams, key=self._score, reverse=True)[: self.width]
        p = self.params
        for index, beam in enumerate(best):
            ended = bool(beam.tokens) and beam.tokens[-1] in self.eos
            ids = beam.tokens[:-1] if ended and not p.include_stop_str_in_output else beam.tokens
            text = self.codec.decode(ids, p.skip_special_tokens, p.spaces_between_special_tokens)
            tail = Delta(index, beam.tokens, text, []) if self.req.stream else None
            reason, stop_reason = ("stop", beam.tokens[-1]) if ended else ("length", None)
            # fewer candidates than beams (allowed_token_ids): fewer choices, the last one says so
            last = index == len(best) - 1
            self.req.emit(Finished(index, beam.tokens, text, None, reason, stop_reason, tail, last))
