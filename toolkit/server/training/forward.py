"""Padded batches and per-token log-probabilities of a causal LM, computed in chunks of positions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from .sequences import Sample


@dataclass
class Batch:
    tokens: torch.Tensor  # [B, T] long
    attention: torch.Tensor  # [B, T] long
    mask: torch.Tensor  # [B, T] float, 1 on trained tokens (never position 0)
    logprobs: torch.Tensor  # [B, T] sampler logprobs, NaN where unknown
    advantages: torch.Tensor  # [B, T]
    weights: torch.Tensor  # [B, T]


def make_batch(samples: Sequence[Sample], pad_id: int, device: torch.device | None = None) -> Batch:
    """The samples padded to one length, on ``device`` (the model's)."""
    length = max(len(s.tokens) for s in samples)
    size = (len(samples), length)
    tokens = torch.full(size, pad_id, dtype=torch.long)
    attention = torch.zeros(size, dtype=torch.long)
    mask = torch.zeros(size)
    logprobs = torch.full(size, float("nan"))
    advantages = torch.zeros(size)
    weights = torch.zeros(size)
    for i, s in enumerate(samples):
        n = len(s.tokens)
        tokens[i, :n] = torch.tensor(s.tokens)
        attention[i, :n] = 1
        mask[i, :n] = torch.tensor(s.mask, dtype=torch.float)
        if s.logprobs:
            logprobs[i, :n] = torch.tensor(s.logprobs)
        advantages[i, :n] = s.advantage
        weights[i, :n] = s.weight
    mask[:, 0] = 0
    return Batch(*(t.to(device) for t in (tokens, attention, mask, logprobs, advantages, weights)))


def token_logprobs(
    model: PreTrainedModel, batch: Batch, chunk_size: int, with_entropy: bool = True
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``logp[b, t] = log p(token t | tokens < t)`` (0 at t = 0) and the entropy of that distribution.

    The output head runs on ``chunk_size`` positions at a time, so the full ``[B, T, vocab]``
    logits never exist at once (``logprob_calculation_chunk_size``).
    """
    hidden = model.base_model(input_ids=batch.tokens, attention_mask=batch.attention).last_hidden_state[
        :, :-1
    ]
    head = model.get_output_embeddings()
    targets = batch.tokens[:, 1:]
    logps: list[torch.Tensor] = []
    entropies: list[torch.Tensor] = []
    for start in range(0, targets.shape[1], chunk_size):
        logits = head(hidden[:, start : start + chunk_size]).float()
        log_probs = torch.log_softmax(logits, dim=-1)
        chunk_targets = targets[:, start : start + chunk_size].unsqueeze(-1)
        logps.append(log_probs.gather(-1, chunk_targets).squeeze(-1))
        if with_entropy:
            entropies.append(-(log_probs.exp() * log_probs).sum(-1).detach())
    zero = torch.zeros(batch.tokens.shape[0], 1, device=batch.tokens.device)
    logp = torch.cat([zero, *logps], dim=1)
    entropy = torch.cat([zero, *entropies], dim=1) if with_entropy else None
    return logp, entropy
