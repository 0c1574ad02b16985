"""The weights one engine serves, loaded on first use: its base model, the LoRA adapters resident
on it (:class:`~.adapter_stack.AdapterStack`), and a few whole-weight checkpoints.

A request names its weights (:class:`~.request.Weights`); the pool routes it: the base runner with
adapter slot 0, the base runner with the slot of a LoRA checkpoint (made resident on first use), or
the runner of a full fine-tuning checkpoint (an LRU of ``LOADED_WEIGHTS`` runners, base included;
a later step of a trained model unloads its idle earlier steps, as the adapters do).
A checkpoint's folder is read when a request first needs it, so a checkpoint is servable as soon as
its folder exists. Used from the engine thread only; :meth:`WeightsPool.usage` is a snapshot.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Container
from dataclasses import dataclass

from .device import Placement
from .lora import LoraAdapter, checkpoint_kind
from .model import BaseModelSpec, kv_shape, load_model
from .request import Weights
from .runner import Runner
from .sources import BaseModelError

LOADED_WEIGHTS = 3
BASE = "base"


@dataclass(frozen=True)
class Route:
    """Where a request runs: the runner (and its batch key) and the adapter slot (0: none)."""

    key: str
    runner: Runner
    adapter: int = 0


@dataclass(frozen=True)
class MemoryUsage:
    """What the pool holds: parameters of loaded runners and resident adapters."""

    loaded: bool
    parameter_bytes: int
    checkpoints: int  # whole-weight checkpoints loaded beside the base
    adapters: int
    adapter_bytes: int


class WeightsPool:
    """Loads and keeps the runners and adapters of one base model."""

    def __init__(self, spec: BaseModelSpec, placement: Placement, lora_bytes: int) -> None:
        self.spec, self.placement, self.lora_bytes = spec, placement, lora_bytes
        self._runners: OrderedDict[str, Runner] = OrderedDict()
        self._lineage: dict[str, tuple[str, int] | None] = {}  # of the loaded checkpoints

    @property
    def base(self) -> Runner:
        """The base model's runner (loaded now if it is not yet)."""
        runner = self._runners.get(BASE)
        if runner is None:
            runner = Runner(
                load_model(self.spec, placement=self.placement), self.spec.max_model_len, self.lora_bytes
            )
            sized = kv_shape(self.spec, runner.dtype)  # the KV cache was sized from config.json alone
            if runner.kv_shape != sized:
                raise BaseModelError(
                    f"base model {self.spec.name!r}: the loaded model keeps {runner.kv_shape} a token, "
                    f"but its config.json reads as {sized}: give head_dim and num_key_value_heads there"
                )
            self._runners[BASE] = runner
        return runner

    @property
    def loaded(self) -> bool:
        return BASE in self._runners

    def route(self, weights: Weights, users: int, busy: Container[str]) -> Route | None:
        """The route of ``weights`` for ``users`` sequences, loading what it needs; None when its
        adapter must wait for room. ``busy``: runner keys in use (never evicted). A checkpoint folder
        that is gone raises ``FileNotFoundError``."""
        if weights.folder is None:
            return Route(BASE, self.base)
        kind = checkpoint_kind(weights.folder)
        if kind is None:
            raise FileNotFoundError(f"{weights.folder} holds no checkpoint")
        if kind == "lora":
            base = self.base
            assert base.adapters is not None
            folder, device, dtype = weights.folder, base.device, base.dtype
            slot = base.adapters.acquire(weights, lambda: LoraAdapter.read(folder, device, dtype), users)
            return None if slot is None else Route(BASE, base, slot)
        runner = self._runners.get(weights.key)
        if runner is None:
            for key in [
                k for k in self._runners if k not in busy and weights.supersedes(self._lineage.get(k))
            ]:
                self._unload(key)  # an earlier step of this model, idle: before the new one loads
            model = load_model(self.spec, weights.folder, self.placement)
            runner = Runner(model, self.spec.max_model_len)
            self._runners[weights.key] = runner
            self._lineage[weights.key] = weights.lineage
            idle = [k for k in self._runners if k not in busy and k not in (BASE, weights.key)]
            for key in idle[: max(0, len(self._runners) - LOADED_WEIGHTS)]:
                self._unload(key)
        self._runners.move_to_end(weights.key)
        return Route(weights.key, runner)

    def _unload(self, key: str) -> None:
        del self._runners[key]
        self._lineage.pop(key, None)

    def release(self, route: Route, users: int = 1) -> None:
        """``users`` sequences of ``route`` ended."""
        if route.adapter and route.runner.adapters is not None:
            route.runner.adapters.release(route.adapter, users)

    def usage(self) -> MemoryUsage:
        base = self._runners.get(BASE)
        adapters = base.adapters if base is not None else None
        return MemoryUsage(
            loaded=base is not None,
            parameter_bytes=sum(r.parameter_bytes for r in self._runners.values()),
            checkpoints=len(self._runners) - (base is not None),
            adapters=adapters.resident if adapters is not None else 0,
            adapter_bytes=adapters.bytes if adapters is not None else 0,
        )
