"""The KV cache of one base model: keys and values in blocks of ``BLOCK`` positions, under a byte
budget (paged, as vLLM does).

Each running sequence holds a block table: the ids of the blocks holding its positions ``0..``,
``BLOCK`` per block. Sequences share blocks by reference count (the ``n`` choices of a request, beams,
prompts with a common prefix), and a sequence copies a shared block before it writes to it. A block
full of prompt tokens is keyed by that prefix (:func:`block_keys`): when its last user leaves, it stays
with its key until its room is needed (least recently used first), so a later prompt with the same
prefix reuses it (prefix caching); at most a quarter of the pool stays so (:data:`IDLE_SHARE`).

Storage is one tensor ``[layers, 2, kv_heads, blocks, BLOCK, head_dim]``, made on first use. On the
CPU its pages are written only as blocks are first used, lowest free block first, so the resident
memory is the most ever in use, not the budget; the engine frees it all once it idles
(:meth:`KVPool.free_storage`). Block 0 holds zeros: it pads the tables of shorter rows.
"""

from __future__ import annotations

import hashlib
import heapq
from collections import OrderedDict
from dataclasses import dataclass

import torch
from torch import Tensor

from .resources import small_pages

BLOCK = 16
IDLE_SHARE = 4
"""At most 1 / ``IDLE_SHARE`` of the blocks hold cached prefixes no sequence uses: an RL loop's every
checkpoint caches prefixes of its own, which would otherwise fill the pool's memory step after step."""


def block_keys(scope: str, tokens: list[int]) -> list[str]:
    """Chained keys of the full blocks of ``tokens``: a key names its block's tokens and every
    token before them, within ``scope`` (weights, user, cache salt)."""
    keys: list[str] = []
    prev = hashlib.sha256(scope.encode()).hexdigest()
    for start in range(0, len(tokens) - BLOCK + 1, BLOCK):
        block = ",".join(map(str, tokens[start : start + BLOCK]))
        prev = hashlib.sha256(f"{prev}|{block}".encode()).hexdigest()
        keys.append(prev)
    return keys


def blocks_for(positions: int) -> int:
    """Blocks that hold ``positions`` positions."""
    return -(-positions // BLOCK)


@dataclass(frozen=True)
class KVShape:
    """What one position's keys and values take: layers, key/value heads, head size, dtype."""

    layers: int
    kv_heads: int
    head_dim: int
    dtype: torch.dtype

    @property
    def token_bytes(self) -> int:
        return self.layers * 2 * self.kv_heads * self.head_dim * self.dtype.itemsize


class KVPool:
    """``budget`` bytes of blocks on ``device``; used from the engine thread only."""

    def __init__(self, shape: KVShape, device: torch.device, budget: int) -> None:
        self.shape, self.device, self.budget = shape, device, budget
        self.block_bytes = shape.token_bytes * BLOCK
        self.num_blocks = max(2, budget // self.block_bytes)
        self.storage: Tensor | None = None
        self.generation = 0  # counts the storages made: a new one has new addresses
        self._reset()

    def _reset(self) -> None:
        self._refs = [0] * self.num_blocks
        self._free = list(range(1, self.num_blocks))  # a heap: lowest first
        self._fresh = 1  # blocks from here on were never written: zeroed when first handed out
        self._block_of: dict[str, int] = {}
        self._key_of: dict[int, str] = {}
        self._idle: OrderedDict[int, None] = OrderedDict()  # keyed blocks no sequence uses, LRU first

    @property
    def tokens(self) -> int:
        """Positions the pool holds (block 0 aside)."""
        return (self.num_blocks - 1) * BLOCK

    @property
    def available(self) -> int:
        """Blocks a sequence can take now: free ones and cached ones no sequence uses."""
        return len(self._free) + len(self._idle)

    @property
    def in_use(self) -> int:
        return self.num_blocks - 1 - self.available

    @property
    def held_bytes(self) -> int:
        """Bytes of the blocks holding keys and values: in use, or cached for reuse."""
        return (self.in_use + len(self._idle)) * self.block_bytes if self.storage is not None else 0

    def layer(self, i: int) -> Tensor:
        """Layer ``i``'s ``[2, kv_heads, blocks, BLOCK, head_dim]``."""
        assert self.storage is not None
        return self.storage[i]

    def _take(self) -> int:
        if self.storage is None:
            s = self.shape
            size = (s.layers, 2, s.kv_heads, self.num_blocks, BLOCK, s.head_dim)
            self.storage = torch.empty(size, dtype=s.dtype, device=self.device)
            self.generation += 1
            small_pages(self.storage)  # resident as its blocks are written, not 2 MB at a time
            self.storage[:, :, :, 0].zero_()
        if self._free:
            block = heapq.heappop(self._free)
        else:
            block, _ = self._idle.popitem(last=False)
            del self._block_of[self._key_of.pop(block)]
        if block >= self._fresh:  # never written: whatever the memory held (NaN too) becomes zeros
            assert self.storage is not None
            self.storage[:, :, :, block].zero_()
            self._fresh = block + 1
        self._refs[block] = 1
        return block

    def grow(self, table: list[int], positions: int) -> bool:
        """Append blocks to ``table`` until it holds ``positions`` positions; False (nothing taken)
        if the pool has too few."""
        need = blocks_for(positions) - len(table)
        if need > self.available:
            return False
        table.extend(self._take() for _ in range(need))
        return True

    def writable(self, table: list[int], position: int) -> bool:
        """Make ``position`` of ``table`` writable: a new block past its end, or a copy of a block it
        shares; False if that needs a block and the pool has none."""
        index = position // BLOCK
        if index < len(table) and self._refs[table[index]] == 1:
            return True
        if not self.available:
            return False
        if index == len(table):
            table.append(self._take())
            return True
        shared, table[index] = table[index], self._take()
        assert self.storage is not None
        self.storage[:, :, :, table[index]] = self.storage[:, :, :, shared]
        self._drop(shared)
        return True

    def fork(self, table: list[int]) -> list[int]:
        """A table sharing every block of ``table``."""
        for block in table:
            self._refs[block] += 1
        return list(table)

    def release(self, table: list[int]) -> None:
        """The sequence of ``table`` no longer needs its blocks (the table is emptied)."""
        for block in table:
            self._drop(block)
        table.clear()

    def _drop(self, block: int) -> None:
        self._refs[block] -= 1
        if self._refs[block] == 0:
            if block in self._key_of:
                self._idle[block] = None
                if len(self._idle) > self.num_blocks // IDLE_SHARE:
                    self._forget(self._idle.popitem(last=False)[0])
            else:
                heapq.heappush(self._free, block)

    def _forget(self, block: int) -> None:
        """An idle cached block loses its key and is free again."""
        del self._block_of[self._key_of.pop(block)]
        heapq.heappush(self._free, block)

    def lookup(self, keys: list[str]) -> list[int]:
        """The cached blocks of the longest prefix of ``keys``, each now used once more."""
        found: list[int] = []
        for key in keys:
            block = self._block_of.get(key)
            if block is None:
                break
            if self._refs[block] == 0:
                del self._idle[block]
            self._refs[block] += 1
            found.append(block)
        return found

    def cached(self, key: str) -> bool:
        return key in self._block_of

    def register(self, keys: list[str], table: list[int]) -> None:
        """Key the first blocks of ``table`` by ``keys`` (full blocks of prompt tokens), where neither
        the key nor the block is keyed yet."""
        for key, block in zip(keys, table, strict=False):
            if key not in self._block_of and block not in self._key_of:
                self._block_of[key], self._key_of[block] = block, key

    def free_storage(self) -> bool:
        """Free the storage (and the cached prefixes) if no sequence holds a block; True if freed."""
        if self.storage is None or self.in_use:
            return False
        self.storage = None
        self._reset()
        return True
