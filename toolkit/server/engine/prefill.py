"""The prefill of the requests admitted together on one runner, in as few prompt tokens as possible.

A prompt's prefix is reused from the prefix cache (16-token blocks of earlier prompts of the same
weights and scope, :mod:`.prefix_cache`) or from a request admitted in the same pass: a prompt that
shares at least one block more with an earlier prompt of the pass than the cache holds waits for
that prompt's prefill (a second, short forward) and copies its keys and values. So requests that
arrive together with one prompt (a group rollout sent as concurrent requests) prefill it once, as
the ``n`` choices of one request always do. Also the prompt logprobs of a request that asks for them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from .events import PromptLogprob
from .prefix_cache import BLOCK, PrefixCache
from .request import Request
from .runner import Runner, SlotCache


@dataclass
class Prompt:
    """One request's prompt in a prefill: its cache slot, adapter, and what it reuses."""

    req: Request
    slot: int
    adapter: int
    keys: list[str]  # its prefix-cache block keys (none: it shares nothing)
    start: int = 0  # prompt tokens reused, not run through the model
    cached: list[Tensor] = field(default_factory=list)  # prefix-cache blocks it reuses
    leader: Prompt | None = None  # the earlier prompt of the pass it copies ``start`` tokens from

    @property
    def may_reuse(self) -> bool:
        """Prompt logprobs need the logits of every prompt token: such a prompt reuses nothing."""
        return bool(self.keys) and self.req.prompt_logprobs is None


def plan(prompts: list[Prompt], prefix_cache: PrefixCache) -> None:
    """Set what each prompt reuses: its cached blocks, or a longer prefix of an earlier prompt."""
    for i, p in enumerate(prompts):
        if not p.may_reuse:
            continue
        p.cached = prefix_cache.lookup(p.keys)
        p.start = len(p.cached) * BLOCK
        best, shared = None, 0
        own = p.req.prompt_ids[:-1]  # the last prompt token always runs (its logits are sampled)
        for q in prompts[:i]:
            # the first block's key chains the scope: prompts of different scopes never share
            if q.leader is None and q.keys[:1] == p.keys[:1]:
                common = _common_prefix(q.req.prompt_ids, own)
                if common > shared:
                    best, shared = q, common
        if best is not None and shared >= p.start + BLOCK:
            p.leader, p.start, p.cached = best, shared, []


def prefill(
    runner: Runner, cache: SlotCache, prompts: list[Prompt], prefix_cache: PrefixCache
) -> tuple[Tensor, list[Tensor | None]]:
    """Run ``prompts`` (those copying from a leader after the leaders) and store their new full
    blocks in the prefix cache. Returns the last position's logits ``[k, V]`` of each prompt, and
    the logits of every prompt position where the request asked for prompt logprobs."""
    last: list[Tensor] = [torch.empty(0)] * len(prompts)
    full: list[Tensor | None] = [None] * len(prompts)
    leaders = [i for i, p in enumerate(prompts) if p.leader is None]
    followers = [i for i, p in enumerate(prompts) if p.leader is not None]
    for wave in (leaders, followers):
        if not wave:
            continue
        for i in wave:
            p = prompts[i]
            if p.leader is not None:
                cache.copy_slot(p.leader.slot, p.slot, p.start)
            elif p.cached:
                cache.write_blocks(p.slot, p.cached)
        logits, every = runner.prefill(
            cache,
            [prompts[i].slot for i in wave],
            [prompts[i].req.prompt_ids[prompts[i].start :] for i in wave],
            [prompts[i].start for i in wave],
            [prompts[i].req.prompt_logprobs is not None for i in wave],
            [prompts[i].adapter for i in wave],
        )
        for row, i in enumerate(wave):
            last[i], full[i] = logits[row], every[row]
            _store(prompts[i], cache, prefix_cache)
    return torch.stack(last), full


def prompt_logprobs(logits: Tensor, prompt: list[int], k: int) -> list[PromptLogprob]:
    """Log-probability, rank and top-``k`` of each prompt token given the tokens before it."""
    logprobs = logits[:-1].log_softmax(-1)
    targets = torch.tensor(prompt[1:])
    chosen = logprobs.gather(-1, targets[:, None])[:, 0]
    ranks = (logprobs > chosen[:, None]).sum(-1) + 1
    top_v, top_i = logprobs.topk(min(k, logprobs.shape[-1]), dim=-1) if k else (None, None)
    out = []
    for pos, token in enumerate(prompt[1:]):
        top = (
            list(zip(top_i[pos].tolist(), top_v[pos].tolist(), strict=True))
            if top_i is not None and top_v is not None
            else []
        )
        out.append(PromptLogprob(token, float(chosen[pos]), int(ranks[pos]), top))
    return out


def _store(p: Prompt, cache: SlotCache, prefix_cache: PrefixCache) -> None:
    """The prompt's full blocks the prefix cache lacks, read from its slot."""
    new = [b for b, key in enumerate(p.keys) if key not in prefix_cache]
    if new:
        blocks = cache.read_blocks(p.slot, new[0], new[-1] + 1)
        for b in new:
            prefix_cache.store(p.keys[b], blocks[b - new[0]])


def _common_prefix(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
