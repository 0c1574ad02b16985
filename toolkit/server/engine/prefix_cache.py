"""A prefix cache of KV blocks, keyed by a scope (weights, user, cache_salt) and the token prefix.

A block holds the keys/values of ``BLOCK`` prompt tokens; its key chains the previous block's key, so
a hit means the whole prefix up to that block matches. Requests of different scopes never share.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

from torch import Tensor

BLOCK = 16


def block_keys(scope: str, tokens: list[int]) -> list[str]:
    """Chained keys of the full blocks of ``tokens``."""
    keys: list[str] = []
    prev = hashlib.sha256(scope.encode()).hexdigest()
    for start in range(0, len(tokens) - BLOCK + 1, BLOCK):
        block = ",".join(map(str, tokens[start : start + BLOCK]))
        prev = hashlib.sha256(f"{prev}|{block}".encode()).hexdigest()
        keys.append(prev)
    return keys


class PrefixCache:
    """LRU store of KV blocks ``[layers, 2, kv_heads, BLOCK, head_dim]`` bounded by bytes."""

    def __init__(self, max_bytes: int = 256 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self.used = 0
        self._blocks: OrderedDict[str, Tensor] = OrderedDict()

    def lookup(self, keys: list[str]) -> list[Tensor]:
        """The cached blocks of the longest cached prefix."""
        found: list[Tensor] = []
        for key in keys:
            block = self._blocks.get(key)
            if block is None:
                break
            self._blocks.move_to_end(key)
            found.append(block)
        return found

    def __contains__(self, key: str) -> bool:
        return key in self._blocks

    def store(self, key: str, block: Tensor) -> None:
        if key in self._blocks:
            return
        size = block.numel() * block.element_size()
        self._blocks[key] = block
        self.used += size
        while self.used > self.max_bytes and self._blocks:
            _, old = self._blocks.popitem(last=False)
            self.used -= old.numel() * old.element_size()
