"""Padded batches and per-token log-probabilities of a causal LM, computed in chunks of positions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch.utils.checkpoint import checkpoint
from transformers import PreTrainedModel

from .sequences import Sample

LOGITS_BYTES = 32 * 2**20
"""Most bytes of float32 logits one chunk of the loss computes at once."""


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
    """``logp[b, t] = log p(token t | tokens < t)`` on the trained tokens (``batch.mask``; 0 elsewhere,
    which every loss and metric masks out) and the entropy of those distributions.

    The output head runs only on the positions before trained tokens (a rollout's prompts, tool
    results and padding are most of an agent batch), gathered into one ``[positions, hidden]`` matrix
    so each chunk is one matrix product, and on a chunk at a time: at most ``chunk_size``
    (``logprob_calculation_chunk_size``) and at most what keeps a chunk's float32 logits under
    :data:`LOGITS_BYTES`. With gradients, each chunk is recomputed in the backward pass instead of
    kept, so the ``[positions, vocab]`` logits never exist at once, nor their softmax and gradient (a
    3,072-token minibatch of a 49,152-token vocabulary would hold 600 MB in each).
    """
    # no KV cache: a decoder layer recomputed in the backward pass (step_memory) would append its keys
    # to it a second time, and a padded batch's mask would then no longer fit them
    hidden = model.base_model(
        input_ids=batch.tokens, attention_mask=batch.attention, use_cache=False
    ).last_hidden_state[:, :-1]
    head = model.get_output_embeddings()
    trained = (batch.mask[:, 1:] != 0).nonzero(as_tuple=True)
    inputs, targets = hidden[trained], batch.tokens[:, 1:][trained]
    step = max(1, min(chunk_size, LOGITS_BYTES // (4 * head.weight.shape[0])))
    recompute = torch.is_grad_enabled() and inputs.requires_grad
    logps: list[torch.Tensor] = []
    entropies: list[torch.Tensor] = []
    for start in range(0, len(targets), step):
        chunk = (head, inputs[start : start + step], targets[start : start + step], with_entropy)
        logp, entropy = checkpoint(_chunk, *chunk, use_reentrant=False) if recompute else _chunk(*chunk)
        logps.append(logp)
        entropies.append(entropy)
    rows, length = batch.tokens.shape
    zeros = torch.zeros(rows, length, device=batch.tokens.device)

    def placed(values: list[torch.Tensor]) -> torch.Tensor:
        # position t holds the logprob of token t, predicted from hidden state t - 1
        return zeros.index_put((trained[0], trained[1] + 1), torch.cat(values)) if values else zeros

    return placed(logps), placed(entropies) if with_entropy else None


def _chunk(
    head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities of ``targets`` after ``hidden``, and their distributions' entropy (no
    gradient; zeros when not asked)."""
    log_probs = torch.log_softmax(head(hidden).float(), dim=-1)
    logp = log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        entropy = -(log_probs.exp() * log_probs).sum(-1) if with_entropy else torch.zeros_like(logp)
    return logp, entropy
