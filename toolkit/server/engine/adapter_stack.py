"""Many LoRA adapters on one base model, applied per row of a batch.

The resident adapters of a base are stacked per target: for each layer and each of the runner's
fused projections (q/k/v, o, gate/up, down), ``A [slots, subs * R, in]`` and a block-diagonal
``scaling * B [slots, out, subs * R]``, ranks zero-padded to the largest resident rank ``R``. Slot 0
stays zero: the base model. A forward names each row's slot (:class:`LoraRows`) and every target
adds ``(x Aᵢᵀ) Bᵢᵀ`` to row ``i``: one pair of matmuls when all rows share an adapter, a pair per
adapter over its rows when few adapters share the batch, else gathered per-row weights and two
batched matmuls (docs/performance.md measures the choice).

Adapters stay resident in least-recently-used order under a byte cap; an adapter some running
sequence uses is never evicted, so a request whose adapter does not fit waits until one frees up. A
later step of a trained model retires the idle earlier steps of that model (an RL loop samples from
its latest step; an earlier one asked for again is read again), so a loop's memory stays flat.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from .lora import AdapterError, LoraAdapter
from .request import Weights

GROUPED_UP_TO = 4
"""Up to this many distinct adapters in a batch, each runs its own matmuls over its rows; beyond it,
per-row weights are gathered for batched matmuls."""


@dataclass(frozen=True)
class Target:
    """One fused projection of a layer: its input width and the modules whose outputs it stacks."""

    name: str
    in_features: int
    modules: tuple[tuple[str, int], ...]  # (module name, out features), in output order

    @property
    def out_features(self) -> int:
        return sum(out for _, out in self.modules)


class LoraRows:
    """The adapter slot of each row of one forward pass (0: the base model)."""

    def __init__(self, slots: list[int], device: torch.device) -> None:
        self.rows = len(slots)
        distinct = sorted(set(slots))
        self.uniform: int | None = distinct[0] if len(distinct) == 1 else None
        self.index = torch.tensor(slots, device=device)
        self.segments: list[tuple[int, Tensor]] | None = [
            (s, torch.tensor([i for i, x in enumerate(slots) if x == s], device=device))
            for s in distinct
            if s
        ]

    @classmethod
    def gathered(cls, index: Tensor) -> LoraRows:
        """Rows whose slots are the tensor ``index`` (``[rows]``, or ``[1]``: one slot for every row),
        read on the device: the same kernels whatever the slots, as a CUDA graph needs."""
        rows = cls.__new__(cls)
        rows.rows, rows.uniform, rows.index, rows.segments = int(index.shape[0]), None, index, None
        return rows


class AdapterStack:
    """The resident adapters of one base model (used from the engine thread only)."""

    def __init__(
        self, targets: list[Target], n_layers: int, device: torch.device, dtype: torch.dtype, max_bytes: int
    ) -> None:
        self.targets, self.n_layers = targets, n_layers
        self.device, self.dtype, self.max_bytes = device, dtype, max_bytes
        self.rank, self.capacity = 0, 1
        self.a: list[list[Tensor]] = []
        self.b: list[list[Tensor]] = []
        self.generation = 0
        self._allocate(1, 0)
        self._resident: OrderedDict[str, int] = OrderedDict()
        self._lineage: dict[str, tuple[str, int] | None] = {}
        self._users: dict[int, int] = {}
        self._free: list[int] = []

    # ------------------------------------------------------------------ residency

    @property
    def resident(self) -> int:
        return len(self._resident)

    def slot_bytes(self, rank: int) -> int:
        per_layer = sum(len(t.modules) * rank * (t.in_features + t.out_features) for t in self.targets)
        return per_layer * self.n_layers * torch.empty((), dtype=self.dtype).element_size()

    def acquire(self, weights: Weights, read: Callable[[], LoraAdapter], users: int = 1) -> int | None:
        """The slot of adapter ``weights`` for ``users`` more sequences, made resident with ``read`` if
        needed (retiring the idle earlier steps of its model, and evicting idle adapters to stay under
        the cap); None when it does not fit while other adapters are in use (the caller waits for
        them to be released)."""
        key = weights.key
        slot = self._resident.get(key)
        if slot is None:
            adapter = read()
            self._check(adapter)
            idle = [k for k, s in self._resident.items() if not self._users.get(s)]
            for old in [k for k in idle if weights.supersedes(self._lineage[k])]:
                self._evict(old)
                idle.remove(old)
            rank = max(self.rank, adapter.rank)
            need = lambda: (len(self._resident) + 1) * self.slot_bytes(rank)  # noqa: E731
            while need() > self.max_bytes and idle:
                self._evict(idle.pop(0))
            if need() > self.max_bytes and self._resident:
                return None
            slot = self._free.pop() if self._free else len(self._resident) + 1
            if slot >= self.capacity or rank > self.rank:
                # doubling, but never past the slots the cap allows at this rank (slot 0, the base,
                # besides) unless the resident adapters' slots need them
                fits = self.max_bytes // self.slot_bytes(rank) + 1
                grown = 2 * self.capacity if slot >= self.capacity else self.capacity
                used = max(self._resident.values(), default=0)
                self._allocate(max(slot + 1, used + 1, min(grown, fits)), rank)
            self._write(slot, adapter)
            self._resident[key] = slot
            self._lineage[key] = weights.lineage
        self._resident.move_to_end(key)
        self._users[slot] = self._users.get(slot, 0) + users
        return slot

    def release(self, slot: int, users: int = 1) -> None:
        if slot:
            self._users[slot] -= users

    def _evict(self, key: str) -> None:
        self._free.append(self._resident.pop(key))
        del self._lineage[key]

    def _allocate(self, capacity: int, rank: int) -> None:
        """Reallocate to ``capacity`` slots of rank ``rank``, keeping the resident adapters."""
        a_new: list[list[Tensor]] = []
        b_new: list[list[Tensor]] = []
        for layer in range(self.n_layers):
            a_row, b_row = [], []
            for g, target in enumerate(self.targets):
                subs = len(target.modules)
                a = torch.zeros(
                    capacity, subs * rank, target.in_features, device=self.device, dtype=self.dtype
                )
                b = torch.zeros(
                    capacity, target.out_features, subs * rank, device=self.device, dtype=self.dtype
                )
                if self.a:
                    old_a, old_b, r = self.a[layer][g], self.b[layer][g], self.rank
                    n = min(capacity, self.capacity)  # fewer slots: those past them are free
                    for k in range(subs):
                        a[:n, k * rank : k * rank + r] = old_a[:n, k * r : (k + 1) * r]
                        b[:n, :, k * rank : k * rank + r] = old_b[:n, :, k * r : (k + 1) * r]
                a_row.append(a)
                b_row.append(b)
            a_new.append(a_row)
            b_new.append(b_row)
        self.a, self.b, self.capacity, self.rank = a_new, b_new, capacity, rank
        self.generation += 1  # new tensors: graphs captured over the old ones are stale
        self.bytes = sum(t.numel() * t.element_size() for per_layer in (*self.a, *self.b) for t in per_layer)

    def _check(self, adapter: LoraAdapter) -> None:
        """The adapter's targets exist in this base model with the same shapes."""
        shapes = {
            (layer, module): (out, t.in_features)
            for layer in range(self.n_layers)
            for t in self.targets
            for module, out in t.modules
        }
        for (layer, module), (lora_a, lora_b) in sorted(adapter.modules.items()):
            shape = shapes.get((layer, module))
            if shape is None:
                raise AdapterError(f"the adapter targets layer {layer} {module}, which this base model lacks")
            if (lora_b.shape[0], lora_a.shape[1]) != shape:
                raise AdapterError(
                    f"layer {layer} {module} is {list(shape)} in this base model, the adapter's "
                    f"lora_B @ lora_A is [{lora_b.shape[0]}, {lora_a.shape[1]}]"
                )

    def _write(self, slot: int, adapter: LoraAdapter) -> None:
        rank = self.rank
        for layer in range(self.n_layers):
            for g, target in enumerate(self.targets):
                a, b = self.a[layer][g][slot], self.b[layer][g][slot]
                a.zero_()
                b.zero_()
                offset = 0
                for k, (module, out) in enumerate(target.modules):
                    pair = adapter.modules.get((layer, module))
                    if pair is not None:
                        r = pair[0].shape[0]
                        a[k * rank : k * rank + r] = pair[0]
                        b[offset : offset + out, k * rank : k * rank + r] = pair[1]
                    offset += out

    # ------------------------------------------------------------------ forward

    def delta(self, layer: int, target: int, x: Tensor, rows: LoraRows) -> Tensor:
        """``scaling * B(A(x))`` of each row's adapter for ``x [rows, T, in]``; rows of slot 0 get 0."""
        a, b = self.a[layer][target], self.b[layer][target]
        if rows.uniform is not None:
            return (x @ a[rows.uniform].T) @ b[rows.uniform].T
        if rows.segments is None:  # gathered on the device; one slot broadcasts over the rows
            return (x @ a.index_select(0, rows.index).mT) @ b.index_select(0, rows.index).mT
        if len(rows.segments) <= GROUPED_UP_TO:
            out = x.new_zeros(*x.shape[:-1], b.shape[1])
            for slot, index in rows.segments:
                out.index_add_(0, index, (x.index_select(0, index) @ a[slot].T) @ b[slot].T)
            return out
        return torch.bmm(torch.bmm(x, a.index_select(0, rows.index).mT), b.index_select(0, rows.index).mT)
