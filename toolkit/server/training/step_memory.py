"""The memory of a gradient step, decided per minibatch before its forward pass.

- **Recomputed layers** (gradient checkpointing): when a forward pass would keep more activations for
  its backward pass than :data:`ACTIVATION_BYTES`, or than the memory left allows, each decoder layer
  keeps only its input and runs again in the backward pass (``torch.utils.checkpoint``,
  non-reentrant). It computes the same values the second time, so the gradients and the checkpoint
  files are the same bytes either way, for about one more forward pass. It works in eval mode too
  (RL runs without dropout), where transformers' own switch does nothing.
- **Refused when it cannot fit**: a minibatch whose step would take more memory than the process has
  left fails its job with a message saying what to lower, before it can take the server down.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING

import torch
from torch.utils.checkpoint import checkpoint

from ..engine.resources import available_memory
from .sequences import UntrainableError

if TYPE_CHECKING:
    from transformers import PreTrainedModel

ACTIVATION_BYTES = 5 << 29
"""Activations a minibatch may keep for its backward pass before its layers are recomputed: 2.5 GiB,
so RL's default 1,024-token minibatches of SmolLM2 (2.2 GiB) run at full speed, within a 6 GB loop."""
ACTIVATIONS_PER_WIDTH = 32
"""Values a decoder layer keeps per token, in units of the hidden size: 75 KB a token and layer of
SmolLM2-135M (hidden 576, float32) with LoRA, measured; its 30 layers make 2.2 MB a token."""
PEAK_KEPT, PEAK_RECOMPUTED = 1.3, 0.7
"""The step's peak resident memory over :func:`activation_bytes`, measured for SmolLM2 on 1,024 tokens
(2.8 and 1.5 GB: glibc's heaps keep several times the live memory at the peak)."""


def activation_bytes(model: PreTrainedModel, tokens: int) -> int:
    """About what a forward pass over ``tokens`` positions keeps for its backward pass."""
    config = model.config
    width = next(model.parameters()).element_size() * config.hidden_size
    return tokens * config.num_hidden_layers * width * ACTIVATIONS_PER_WIDTH


@contextmanager
def step_memory(model: PreTrainedModel, tokens: int) -> Iterator[bool]:
    """Open around a forward pass with gradients over ``tokens`` positions: its decoder layers are
    recomputed in the backward pass if it would keep more than :data:`ACTIVATION_BYTES`, and an
    :class:`UntrainableError` says what to lower if the step cannot fit in the memory left. Yields
    whether the layers are recomputed."""
    kept = activation_bytes(model, tokens)
    if not torch.is_grad_enabled():
        yield False
        return
    free = available_memory()
    # over the budget, or too much for the memory left unless recomputed (the same gradients either way)
    recompute = kept > ACTIVATION_BYTES or (free is not None and kept * PEAK_KEPT > free)
    need = kept * (PEAK_RECOMPUTED if recompute else PEAK_KEPT)
    if free is not None and need > free:
        raise UntrainableError(
            f"a minibatch of {tokens} tokens needs about {need / 2**30:.1f} GiB for its gradient step and "
            f"{free / 2**30:.1f} GiB of memory are left: lower packed_sequence_length (RL) or batch_size "
            "(SFT), or free memory"
        )
    layers = list(getattr(model.base_model, "layers", [])) if recompute else []
    for layer in layers:
        layer.forward = partial(checkpoint, layer.forward, use_reentrant=False)
    try:
        yield recompute
    finally:
        for layer in layers:
            del layer.forward  # the class's own again
