"""Which waiting requests an engine iteration admits, and how sequences enter the batches.

A request is admitted, first come first served (or by priority), while the running sequences stay
within ``max_num_seqs`` and the KV pool has the blocks it counts for it (:func:`.kv_room.admission_blocks`);
preempted sequences resume before anything new is admitted. An admitted request's sequences join its
runner's batch, the first choice's prompt to be prefilled (:mod:`.prefill`) and the other choices
sharing its blocks; a preempted sequence resumes by running its cached tokens again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from .codec import Codec
from .events import Failed
from .kv_pool import KVPool, block_keys
from .kv_room import admission_blocks
from .prefill import Prompt, plan, prefill
from .request import Request
from .runner import Runner
from .running import Batch, Sequence
from .weights import Route, WeightsPool

log = logging.getLogger("toolkit.engine")
Admitted = list[tuple[Request, Route]]


class Admission:
    """The batches of one engine, by runner key, and what enters them."""

    def __init__(
        self, weights: WeightsPool, kv: KVPool, codec: Codec, eos: list[int], prefix_caching: bool
    ) -> None:
        self.weights, self.kv, self.codec, self.eos = weights, kv, codec, eos
        self.prefix_caching = prefix_caching
        self.batches: dict[str, Batch] = {}

    def choose(
        self, waiting: list[Request], running: int, budget: int, max_seqs: int
    ) -> tuple[dict[str, Admitted], list[Request]]:
        """The requests admitted now, grouped by runner key (``"beam"`` for beam searches), and those
        left waiting, with ``running`` sequences running and ``budget`` KV blocks to give."""
        groups: dict[str, Admitted] = {}
        left: list[Request] = []
        for i, req in enumerate(waiting):
            need = req.beam.width if req.beam else len(req.params)
            blocks = admission_blocks(req)
            if running and (running + need > max_seqs or blocks > budget):
                left += waiting[i:]
                break
            try:
                route = self.weights.route(req.weights, 1 if req.beam else need, self.batches)
            except Exception as exc:  # weights that cannot load fail their request only
                log.warning("cannot load %s: %s", req.weights.key, exc)
                req.emit(Failed(exc))
                continue
            if route is None:  # its adapter waits for room among the resident ones
                left.append(req)
                continue
            running += need
            budget -= blocks
            groups.setdefault("beam" if req.beam else route.key, []).append((req, route))
        return groups, left

    def batch(self, route: Route) -> Batch:
        batch = self.batches.get(route.key)
        if batch is None:
            batch = self.batches[route.key] = Batch(route, self.weights, self.kv)
        return batch

    def prefix_keys(self, req: Request) -> list[str]:
        """The prefix-cache keys of ``req``'s full prompt blocks (none if it shares nothing)."""
        if not self.prefix_caching or req.cache_scope is None:
            return []
        return block_keys(f"{req.weights.key}|{req.cache_scope}", req.prompt_ids[:-1])

    def place(self, admitted: Admitted) -> tuple[Batch, list[list[Sequence]], list[Prompt]]:
        """Put each request's sequences in its runner's batch: the batch, each request's choices and
        the prompt of each request's first choice. If this fails, the requests not yet placed give
        back the users their routes counted for them (a placed sequence gives back its own when it
        leaves the batch)."""
        placed = 0
        try:
            batch = self.batch(admitted[0][1])
            choices: list[list[Sequence]] = []
            for req, route in admitted:
                seqs = [Sequence(req, i, route, self.codec, self.eos) for i in range(len(req.params))]
                batch.seqs.extend(seqs)
                placed += 1
                choices.append(seqs)
        except Exception:
            for req, route in admitted[placed:]:
                self.weights.release(route, len(req.params))
            raise
        logprobs = [seqs[0].req.prompt_logprobs is not None for seqs in choices]
        prompts = [
            Prompt(seqs[0], seqs[0].prompt_ids, self.prefix_keys(seqs[0].req), wants)
            for seqs, wants in zip(choices, logprobs, strict=True)
        ]
        return batch, choices, prompts

    def resume(self, seqs: list[Sequence], threads: Callable[[Runner, int], None]) -> None:
        """Preempted sequences take their batch places again: their cached tokens run again (cached
        prompt blocks reused) and they go on from their last sampled token."""
        for key in dict.fromkeys(s.route.key for s in seqs):
            group = [s for s in seqs if s.route.key == key]
            batch = self.batch(group[0].route)
            batch.seqs.extend(group)
            prompts = [Prompt(s, s.cached_ids, self.prefix_keys(s.req)) for s in group]
            plan(prompts, self.kv)
            threads(batch.runner, sum(len(p.tokens) - p.start for p in prompts))
            prefill(batch.runner, self.kv, prompts)
