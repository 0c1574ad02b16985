"""Sampling parameters and the per-step logits pipeline, in vLLM's order (chat-completions.md 2.6).

grammar mask -> allowed_token_ids -> bad_words -> logit_bias -> min_tokens -> logits processors ->
penalties -> greedy argmax | temperature -> min_p -> top-k -> top-p -> exponential-race sample.
Reported logprobs are the raw model log-probabilities after the grammar mask only.

The pipeline runs on the device of the logits it is given; the random numbers of the race come
from each row's CPU generator (one exponential draw per vocabulary entry), so a seed draws the same
numbers wherever the logits are, unless a :class:`DeviceRandom` draws them on the device. The engine
hands it CPU logits unless device sampling is on (``TOOLKIT_DEVICE_SAMPLING``, :mod:`.resources`).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import Tensor

GREEDY_EPS = 1e-5
LogitsProcessor = Callable[[list[int], Tensor], Tensor]
"""(output token ids so far, logits [V]) -> logits [V]."""


@dataclass
class SamplingParams:
    """Resolved, validated generation settings of one sequence."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: dict[int, float] = field(default_factory=dict)
    seed: int | None = None
    min_tokens: int = 0
    ignore_eos: bool = False
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    include_stop_str_in_output: bool = False
    allowed_token_ids: list[int] | None = None
    bad_words_ids: list[list[int]] = field(default_factory=list)
    logprobs: int | None = None  # number of top logprobs per token (0 = the sampled one only)
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    logits_processors: list[LogitsProcessor] = field(default_factory=list)

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_EPS

    @property
    def penalised(self) -> bool:
        return bool(self.presence_penalty or self.frequency_penalty or self.repetition_penalty != 1.0)


class RowState(Protocol):
    """What the pipeline needs to know about one sequence at one step."""

    params: SamplingParams
    generator: torch.Generator | None
    prompt_ids: list[int]
    output_ids: list[int]
    stop_ids: frozenset[int]  # EOS and stop_token_ids that min_tokens holds back

    @property
    def grammar_mask(self) -> Tensor | None:
        """Bool ``[V]``: the tokens the grammar allows; None if unconstrained."""


@dataclass
class StepResult:
    tokens: list[int]
    logprobs: list[float] | None  # raw logprob of each sampled token (rows that asked only)
    top: list[list[tuple[int, float]]] | None


def _ban_bad_words(logits: Tensor, words: Sequence[Sequence[int]], output: list[int]) -> None:
    for word in words:
        prefix = list(word[:-1])
        if not prefix or output[-len(prefix) :] == prefix:
            logits[word[-1]] = -float("inf")


def _penalise(logits: Tensor, p: SamplingParams, prompt: list[int], output: list[int]) -> Tensor:
    vocab, device = logits.shape[0], logits.device
    if p.repetition_penalty != 1.0:
        seen = torch.zeros(vocab, dtype=torch.bool, device=device)
        seen[torch.tensor(prompt + output, dtype=torch.long, device=device)] = True
        penalised = torch.where(logits > 0, logits / p.repetition_penalty, logits * p.repetition_penalty)
        logits = torch.where(seen, penalised, logits)
    if output and (p.frequency_penalty or p.presence_penalty):
        ids = torch.tensor(output, dtype=torch.long, device=device)
        counts = torch.bincount(ids, minlength=vocab)[:vocab].float()
        logits = logits - p.frequency_penalty * counts - p.presence_penalty * (counts > 0).float()
    return logits


def _process_row(logits: Tensor, row: RowState) -> Tensor:
    """The per-sequence logits processors, in order, on one row ``[V]`` (a copy)."""
    p = row.params
    if p.allowed_token_ids is not None:
        keep = torch.full_like(logits, -float("inf"))
        keep[p.allowed_token_ids] = 0.0
        logits = logits + keep
    if p.bad_words_ids:
        _ban_bad_words(logits, p.bad_words_ids, row.output_ids)
    for token, bias in p.logit_bias.items():
        logits[token] += bias
    if len(row.output_ids) < p.min_tokens and row.stop_ids:
        logits[list(row.stop_ids)] = -float("inf")
    for processor in p.logits_processors:
        logits = processor(list(row.output_ids), logits)
    if p.penalised:
        logits = _penalise(logits, p, row.prompt_ids, row.output_ids)
    return logits


def _needs_row_processing(p: SamplingParams, row: RowState) -> bool:
    return bool(
        p.allowed_token_ids is not None
        or p.bad_words_ids
        or p.logit_bias
        or (len(row.output_ids) < p.min_tokens and row.stop_ids)
        or p.logits_processors
        or p.penalised
    )


def _filter(logits: Tensor, params: Sequence[SamplingParams]) -> Tensor:
    """min_p, then top-k, then top-p, each row with its own setting (0 / 1.0 = off)."""
    device = logits.device
    if any(p.min_p > 0 for p in params):
        min_p = torch.tensor([p.min_p for p in params], device=device, dtype=torch.float32)
        probs = logits.softmax(-1)
        threshold = probs.max(-1, keepdim=True).values * min_p[:, None]
        logits = logits.masked_fill(probs < threshold, -float("inf"))
    use_k, use_p = any(p.top_k > 0 for p in params), any(p.top_p < 1.0 for p in params)
    if not (use_k or use_p):
        return logits
    ordered, index = logits.sort(-1, descending=False)
    vocab = logits.shape[-1]
    if use_k:
        top_k = torch.tensor([p.top_k for p in params], device=device)
        k = torch.where(top_k > 0, top_k.clamp(max=vocab), torch.full_like(top_k, vocab))
        kth = ordered.gather(-1, (vocab - k)[:, None].long())
        ordered = ordered.masked_fill(ordered < kth, -float("inf"))
    if use_p:
        top_p = torch.tensor([p.top_p for p in params], device=device, dtype=torch.float32)
        cum = ordered.softmax(-1).cumsum(-1)
        drop = cum <= (1 - top_p)[:, None]
        drop[:, -1] = False
        ordered = ordered.masked_fill(drop, -float("inf"))
    return torch.empty_like(logits).scatter_(-1, index, ordered)


def race_noise(
    shape: torch.Size,
    rows: Sequence[RowState],
    sampled: Sequence[bool],
    fallback: torch.Generator,
    pool: ThreadPoolExecutor | None = None,
    pin_memory: bool = False,
) -> Tensor:
    """``[B, V]`` exponential draws on the CPU, row ``i`` from its own generator (``fallback`` when
    it has none) where ``sampled[i]``; other rows are left unset. With ``pool``, rows with a
    generator of their own are drawn in its threads (each row's numbers depend on its generator
    only, so they are the same), the others in order in this thread (they share ``fallback``).
    ``pin_memory``: in page-locked memory, for a copy to a CUDA device that does not wait."""
    noise = torch.empty(shape, dtype=torch.float32, pin_memory=pin_memory)
    own = [i for i, r in enumerate(rows) if sampled[i] and r.generator is not None]
    shared = [i for i, r in enumerate(rows) if sampled[i] and r.generator is None]
    if pool is not None and len(own) > 1:
        draws = list(pool.map(lambda i: noise[i].exponential_(generator=rows[i].generator), own))
        assert len(draws) == len(own)
    else:
        shared = sorted(own + shared)
    for i in shared:
        noise[i].exponential_(generator=rows[i].generator or fallback)
    return noise


class DeviceRandom:
    """The race's random numbers drawn on ``device``: each seeded row from a generator on the device
    seeded with its request's seed (made at its first draw, kept while the row lives), so its numbers
    depend on its seed only, whatever else is in the batch; the unseeded rows in one draw from a
    shared generator. One kernel per seeded row instead of a vocabulary of CPU draws copied over.
    The numbers are not the CPU generators' (a GPU's Philox stream): a seed gives the same tokens on
    the same kind of device, not the tokens of the CPU path."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._own: weakref.WeakKeyDictionary[RowState, torch.Generator] = weakref.WeakKeyDictionary()
        self._shared = torch.Generator(device).manual_seed(time.time_ns() % 2**63)

    def noise(self, shape: torch.Size, rows: Sequence[RowState], sampled: Sequence[bool]) -> Tensor:
        """``[B, V]`` exponential draws on the device where ``sampled[i]``; other rows left unset."""
        noise = torch.empty(shape, device=self.device, dtype=torch.float32)
        shared = []
        for i, row in enumerate(rows):
            if not sampled[i]:
                continue
            if row.params.seed is None:
                shared.append(i)
                continue
            generator = self._own.get(row)
            if generator is None:
                generator = torch.Generator(self.device).manual_seed(row.params.seed % 2**64)
                self._own[row] = generator
            noise[i].exponential_(generator=generator)
        if shared:
            index = torch.tensor(shared, device=self.device)
            draws = torch.empty((len(shared), shape[-1]), device=self.device, dtype=torch.float32)
            noise[index] = draws.exponential_(generator=self._shared)
        return noise


def sample(
    logits: Tensor,
    rows: Sequence[RowState],
    fallback: torch.Generator,
    pool: ThreadPoolExecutor | None = None,
    device_random: DeviceRandom | None = None,
) -> StepResult:
    """Pick one token per row of ``logits`` ``[B, V]`` (float32), on the logits' device; the race's
    random numbers are drawn on the CPU (:func:`race_noise`, with ``pool`` if given) and moved there,
    or on the device by ``device_random``."""
    device = logits.device
    masks = [i for i, r in enumerate(rows) if r.grammar_mask is not None]
    for i in masks:
        mask = rows[i].grammar_mask
        assert mask is not None
        logits[i] = logits[i].masked_fill(~mask.to(device), -float("inf"))
    want_logprobs = [r.params.logprobs is not None for r in rows]
    raw = logits.log_softmax(-1) if any(want_logprobs) else None
    special = [i for i, r in enumerate(rows) if _needs_row_processing(r.params, r)]
    if special:
        logits = logits.clone()
        for i in special:
            logits[i] = _process_row(logits[i].clone(), rows[i])
    sampled = [not r.params.greedy for r in rows]
    tokens = logits.argmax(-1)
    if any(sampled):
        temps = torch.tensor([r.params.temperature for r in rows], device=device, dtype=torch.float32)
        greedy = torch.tensor([not s for s in sampled], device=device)
        scaled = logits / torch.where(greedy, torch.ones_like(temps), temps.clamp(min=0.01))[:, None]
        probs = _filter(scaled, [r.params for r in rows]).softmax(-1)
        if device_random is not None:
            noise = device_random.noise(probs.shape, rows, sampled)
        else:
            noise = race_noise(probs.shape, rows, sampled, fallback, pool, device.type == "cuda")
        tokens = torch.where(greedy, tokens, (probs / noise.to(device, non_blocking=True)).argmax(-1))
    if raw is None:
        return StepResult(tokens.tolist(), None, None)
    # one copy to the host (the step's one wait on the device): tokens, their logprobs, the top k
    # ids and logprobs, as float64 (exact for both)
    k = min(max((r.params.logprobs or 0) for r in rows), raw.shape[-1])
    values, ids = raw.topk(k, dim=-1) if k else (raw[:, :0], tokens[:, None][:, :0])
    chosen = raw.gather(-1, tokens[:, None])
    packed = torch.cat((tokens[:, None].double(), chosen.double(), ids.double(), values.double()), dim=1)
    table = packed.tolist()
    top = [
        [(int(table[i][2 + j]), table[i][2 + k + j]) for j in range(min(r.params.logprobs or 0, k))]
        for i, r in enumerate(rows)
    ]
    return StepResult([int(row[0]) for row in table], [row[1] for row in table], top)
