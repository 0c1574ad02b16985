"""How big a base model's KV cache is (``--kv-cache-memory-bytes``, else a default per device), and
the context length that fits in it (``--max-model-len``), decided before the server binds."""

from __future__ import annotations

import logging

from .device import Placement
from .kv_pool import KVPool
from .model import BaseModelSpec, kv_shape
from .resources import kv_cache_budget
from .sources import BaseModelError

log = logging.getLogger("toolkit.engine")


def kv_pool_for(spec: BaseModelSpec, placement: Placement, budget: int | None) -> KVPool:
    """An empty KV pool of ``budget`` bytes (None: the device's default) for ``spec``."""
    size = budget if budget is not None else kv_cache_budget(placement.device)
    return KVPool(kv_shape(spec, placement.dtype), placement.device, size)


def fit_context(
    spec: BaseModelSpec, pool: KVPool, max_model_len: int | None, *, explicit_budget: bool
) -> None:
    """Set ``spec.max_model_len`` to ``max_model_len`` (at most the model's own) and make sure one
    sequence of that length fits in ``pool``: lowered to fit, with a warning, unless both the length
    and the budget were given, which is a :class:`BaseModelError` (vLLM refuses to start then)."""
    if max_model_len is not None:
        if max_model_len > spec.max_model_len:
            raise BaseModelError(
                f"--max-model-len {max_model_len} is longer than the context of {spec.name} "
                f"({spec.max_model_len} tokens)"
            )
        spec.max_model_len = max_model_len
    if spec.max_model_len <= pool.tokens:
        return
    if max_model_len is not None and explicit_budget:
        raise BaseModelError(
            f"--kv-cache-memory-bytes {pool.budget} holds {pool.tokens} tokens of "
            f"{spec.name} ({pool.shape.token_bytes} bytes each), fewer than --max-model-len {max_model_len}: "
            "raise the first or lower the second"
        )
    log.warning(
        "%s: the KV cache holds %d tokens (%d bytes each), so its context is lowered from %d to %d "
        "tokens (serve with a larger --kv-cache-memory-bytes to keep it)",
        spec.name,
        pool.tokens,
        pool.shape.token_bytes,
        spec.max_model_len,
        pool.tokens,
    )
    spec.max_model_len = pool.tokens
