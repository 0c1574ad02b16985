"""Minibatches as prefix trees and per-token log-probabilities of a causal LM, computed in chunks of
positions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch.utils.checkpoint import checkpoint

from .sequences import Sample

if TYPE_CHECKING:
    from transformers import PreTrainedModel

LOGITS_BYTES = 32 * 2**20
"""Most bytes of float32 logits one chunk of the loss computes at once."""
TREE_NODES = 8192
"""Most nodes a minibatch runs as a prefix tree: its ``[N, N]`` mask takes 5 bytes a pair (320 MiB at
8,192). A larger minibatch, or one whose rows share no prefix, runs as its padded rows."""
PAIR_COST = 2.5
"""The work of one attended pair of positions per unit of hidden size and per layer, against one
parameter's work per position: fitted on the CPU to an SFT step of 16 lookup demonstrations on the
built-in 1M model (0.93 s as a tree, 0.39 s as padded rows). On SmolLM2 the parameters dominate."""


@dataclass
class Tree:
    """A minibatch's rows as one prefix tree: a prefix that several rows share (an agent batch's
    system prompt and tools, a group's question, the same first turn) is one run of nodes, computed
    once. Nodes come after their parents; a node sees itself and its ancestors only."""

    tokens: torch.Tensor  # [N] long, a node's token
    parents: torch.Tensor  # [N] long, the node before it (-1 for a row's first token)
    positions: torch.Tensor  # [N] long, its position in its rows
    nodes: torch.Tensor  # [B, T] long, the node of each row's token (0 on padding)

    @classmethod
    def of(cls, rows: Sequence[Sequence[int]], length: int) -> Tree:
        children: dict[tuple[int, int], int] = {}
        tokens: list[int] = []
        parents: list[int] = []
        positions: list[int] = []
        nodes = torch.zeros(len(rows), length, dtype=torch.long)
        for r, row in enumerate(rows):
            path, parent = [], -1
            for position, token in enumerate(row):
                node = children.get((parent, token))
                if node is None:
                    node = children[(parent, token)] = len(tokens)
                    tokens.append(token)
                    parents.append(parent)
                    positions.append(position)
                path.append(node)
                parent = node
            nodes[r, : len(path)] = torch.tensor(path, dtype=torch.long)
        return cls(torch.tensor(tokens), torch.tensor(parents), torch.tensor(positions), nodes)

    def attention(self, dtype: torch.dtype) -> torch.Tensor:
        """The ``[1, 1, N, N]`` additive mask: 0 where a node sees a node (itself, its ancestors), the
        dtype's lowest value elsewhere, as the attention of every transformers model takes it."""
        size = len(self.tokens)
        sees = torch.zeros(size, size, dtype=torch.bool)
        for node, parent in enumerate(self.parents.tolist()):
            if parent >= 0:
                sees[node] = sees[parent]
            sees[node, node] = True
        mask = torch.zeros(size, size, dtype=dtype).masked_fill_(~sees, torch.finfo(dtype).min)
        return mask[None, None]

    def to(self, device: torch.device | None) -> Tree:
        return Tree(*(t.to(device) for t in (self.tokens, self.parents, self.positions, self.nodes)))


@dataclass
class Batch:
    tokens: torch.Tensor  # [B, T] long
    attention: torch.Tensor  # [B, T] long
    mask: torch.Tensor  # [B, T] float, 1 on trained tokens (never position 0)
    logprobs: torch.Tensor  # [B, T] sampler logprobs, NaN where unknown
    advantages: torch.Tensor  # [B, T]
    weights: torch.Tensor  # [B, T]
    tree: Tree | None  # what the model runs on, each shared prefix once; None: the padded rows

    @property
    def num_positions(self) -> int:
        """The positions the model runs on: the tree's nodes, or the padded rows' tokens."""
        return len(self.tree.tokens) if self.tree is not None else self.tokens.numel()


def costs(model: PreTrainedModel) -> tuple[float, float]:
    """What one position and one attended pair of positions cost ``model``, in one unit: its weights
    but the embeddings, and :data:`PAIR_COST` times its hidden size and layers."""
    config = model.config
    embeddings = config.vocab_size * config.hidden_size
    weights = sum(p.numel() for p in model.parameters()) - embeddings
    return float(weights), PAIR_COST * config.hidden_size * config.num_hidden_layers


def make_batch(
    samples: Sequence[Sample],
    pad_id: int,
    device: torch.device | None = None,
    cost: tuple[float, float] = (1.0, 0.0),
) -> Batch:
    """The samples padded to one length, and as a prefix tree where that costs less (and has at most
    :data:`TREE_NODES`), on ``device`` (the model's). ``cost``: a position's and an attended pair's
    (:func:`costs`); the tree attends over all its nodes at once, each padded row over itself, padding
    included. By default, a tree wherever it saves positions."""
    length = max(len(s.tokens) for s in samples)
    size = (len(samples), length)
    tokens = torch.full(size, pad_id, dtype=torch.long)
    attention = torch.zeros(size, dtype=torch.long)
    mask = torch.zeros(size, dtype=torch.float32)
    logprobs = torch.full(size, float("nan"), dtype=torch.float32)
    advantages = torch.zeros(size, dtype=torch.float32)
    weights = torch.zeros(size, dtype=torch.float32)
    for i, s in enumerate(samples):
        n = len(s.tokens)
        tokens[i, :n] = torch.tensor(s.tokens)
        attention[i, :n] = 1
        mask[i, :n] = torch.tensor(s.mask, dtype=torch.float)
        if s.logprobs:
            logprobs[i, :n] = torch.tensor(s.logprobs, dtype=torch.float32)
        advantages[i, :n] = s.advantage
        weights[i, :n] = s.weight
    mask[:, 0] = 0
    tokens, attention, mask, logprobs, advantages, weights = (
        t.to(device) for t in (tokens, attention, mask, logprobs, advantages, weights)
    )
    tree = Tree.of([s.tokens for s in samples], length)
    nodes, (position, pair) = len(tree.tokens), cost
    as_tree = position * nodes + pair * nodes**2
    as_rows = (position + pair * length) * len(samples) * length  # every padded position runs
    saves = as_tree < as_rows and nodes <= TREE_NODES
    return Batch(tokens, attention, mask, logprobs, advantages, weights, tree.to(device) if saves else None)


def token_logprobs(
    model: PreTrainedModel, batch: Batch, chunk_size: int, with_entropy: bool = True
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``logp[b, t] = log p(token t | tokens < t)`` on the trained tokens (``batch.mask``; 0 elsewhere,
    which every loss and metric masks out) and the entropy of those distributions.

    The model runs once over the batch's prefix tree (:class:`Tree`) where it has one, else over its
    padded rows: the values of a node depend on its ancestors only, so they are the rows' own, and a
    shared prefix costs its tokens once. The output head runs only on the nodes before trained
    tokens, once for a token trained in several rows, gathered into one ``[positions, hidden]``
    matrix so each chunk is one matrix product, and on a chunk at a time: at most ``chunk_size``
    (``logprob_calculation_chunk_size``) and at most what keeps a chunk's float32 logits under
    :data:`LOGITS_BYTES`. With gradients, each chunk is recomputed in the backward pass instead of
    kept, so the ``[positions, vocab]`` logits never exist at once, nor their softmax and gradient (a
    3,072-token minibatch of a 49,152-token vocabulary would hold 600 MB in each).
    """
    trained = (batch.mask != 0).nonzero(as_tuple=True)
    inputs, targets, copies = _head_inputs(model, batch, trained)
    head = model.get_output_embeddings()
    step = max(1, min(chunk_size, LOGITS_BYTES // (4 * head.weight.shape[0])))
    recompute = torch.is_grad_enabled() and inputs.requires_grad
    logps: list[torch.Tensor] = []
    entropies: list[torch.Tensor] = []
    for start in range(0, len(targets), step):
        chunk = (head, inputs[start : start + step], targets[start : start + step], with_entropy)
        logp, entropy = checkpoint(_chunk, *chunk, use_reentrant=False) if recompute else _chunk(*chunk)
        logps.append(logp)
        entropies.append(entropy)
    zeros = torch.zeros(batch.tokens.shape, device=batch.tokens.device, dtype=torch.float32)

    def placed(values: list[torch.Tensor]) -> torch.Tensor:
        if not values:
            return zeros
        per_node = torch.cat(values)
        return zeros.index_put(trained, per_node if copies is None else per_node[copies])

    return placed(logps), placed(entropies) if with_entropy else None


def _head_inputs(
    model: PreTrainedModel, batch: Batch, trained: tuple[torch.Tensor, ...]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The hidden states the output head runs on, the tokens they predict, and for each ``trained``
    position (``batch.mask``'s nonzero entries, in order) the row of them it takes (None: one row
    each, in order)."""
    # no KV cache: a decoder layer recomputed in the backward pass (step_memory) would append its keys
    # to it a second time, and the mask would then no longer fit them
    tree = batch.tree
    if tree is None:
        hidden = model.base_model(
            input_ids=batch.tokens, attention_mask=batch.attention, use_cache=False
        ).last_hidden_state
        # token t is predicted from hidden state t - 1 of its row
        return hidden[trained[0], trained[1] - 1], batch.tokens[trained], None
    hidden = model.base_model(
        input_ids=tree.tokens[None],
        attention_mask=tree.attention(model.dtype).to(tree.tokens.device),
        position_ids=tree.positions[None],
        use_cache=False,
    ).last_hidden_state[0]
    # each trained node once: the logprob of its token after its parent's hidden state
    nodes, copies = torch.unique(tree.nodes[trained], return_inverse=True)
    return hidden[tree.parents[nodes]], tree.tokens[nodes], copies


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
