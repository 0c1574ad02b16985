"""The prefill of the sequences admitted together on one runner, in as few prompt tokens as possible.

A prompt's prefix is reused from the KV pool's cached blocks (16-token blocks of earlier prompts of
the same weights and scope, :mod:`.kv_pool`) or from a prompt admitted in the same pass: a prompt
that shares at least one block more with an earlier prompt of the pass than the cache holds waits
for that prompt's prefill (a second, short forward) and then shares its blocks, the last one
partly (copied before it writes there). So requests that
arrive together with one prompt (a group rollout sent as concurrent requests) prefill it once, as
the ``n`` choices of one request always do. A preempted sequence resumes the same way, its prompt
being every token it had in the cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .kv_pool import BLOCK, KVPool, blocks_for
from .runner import Runner
from .running import Sequence


@dataclass
class Prompt:
    """What one sequence puts in its blocks, and what it may reuse."""

    seq: Sequence
    tokens: list[int]  # the request's prompt, or every cached token of a sequence resuming
    keys: list[str]  # prefix-cache keys of its full prompt blocks (none: it shares nothing)
    logprobs: bool = False  # prompt logprobs need the logits of every position: it reuses nothing
    start: int = 0  # tokens reused, not run through the model
    leader: Prompt | None = None  # the earlier prompt of the pass whose first ``start`` tokens it shares

    @property
    def may_reuse(self) -> bool:
        return bool(self.keys) and not self.logprobs


def plan(prompts: list[Prompt], pool: KVPool) -> None:
    """Set what each prompt reuses: its cached blocks, or a longer prefix of an earlier prompt of
    the pass (its leader)."""
    for i, p in enumerate(prompts):
        if not p.may_reuse:
            continue
        p.start = BLOCK * next((n for n, key in enumerate(p.keys) if not pool.cached(key)), len(p.keys))
        best, shared = None, 0
        own = p.tokens[:-1]  # the last token always runs (its logits are sampled)
        for q in prompts[:i]:
            # the first block's key chains the scope: prompts of different scopes never share
            if q.leader is None and q.keys[:1] == p.keys[:1]:
                common = _common_prefix(q.tokens, own)
                if common > shared:
                    best, shared = q, common
        if best is not None and shared >= p.start + BLOCK:
            p.leader, p.start = best, shared


def prefill(runner: Runner, pool: KVPool, prompts: list[Prompt]) -> tuple[Tensor, list[Tensor | None]]:
    """Give each prompt's sequence its blocks (cached or its leader's first) and run what is not
    reused, the prompts with a leader after the others; key the new full prompt blocks for reuse. The
    pool must have room for every prompt (the engine checks before admitting). Returns the last
    position's logits ``[k, V]`` of each prompt, and the logits of every position where asked."""
    last: list[Tensor] = [torch.empty(0)] * len(prompts)
    full: list[Tensor | None] = [None] * len(prompts)
    leaders = [i for i, p in enumerate(prompts) if p.leader is None]
    for wave in (leaders, [i for i, p in enumerate(prompts) if p.leader is not None]):
        if not wave:
            continue
        for i in wave:
            _take_blocks(prompts[i], pool)
        logits, every = runner.prefill(
            pool,
            [prompts[i].seq.blocks for i in wave],
            [prompts[i].tokens[prompts[i].start :] for i in wave],
            [prompts[i].start for i in wave],
            [prompts[i].logprobs for i in wave],
            [prompts[i].seq.route.adapter for i in wave],
        )
        for row, i in enumerate(wave):
            last[i], full[i] = logits[row], every[row]
            pool.register(prompts[i].keys, prompts[i].seq.blocks)
    return torch.stack(last), full


def _take_blocks(p: Prompt, pool: KVPool) -> None:
    """Give ``p``'s sequence the blocks of its prompt: its leader's first ones (the last shared one
    copied if only part of it is shared), or cached ones, then new ones for the rest."""
    if p.leader is not None:
        p.seq.blocks = pool.fork(p.leader.seq.blocks[: blocks_for(p.start)])
        room = p.start % BLOCK == 0 or pool.writable(p.seq.blocks, p.start)
    else:
        p.seq.blocks = pool.lookup(p.keys) if p.may_reuse else []
        p.start, room = len(p.seq.blocks) * BLOCK, True
    if not (room and pool.grow(p.seq.blocks, len(p.tokens))):
        raise RuntimeError("the KV cache has no room for a prompt admitted to it")


def _common_prefix(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
