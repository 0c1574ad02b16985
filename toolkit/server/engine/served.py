"""Every model the server serves: its base models, each by every name users send and each with its
own engine (weights loaded on first use), and the adapters named at start-up (``--lora-modules``).
Checkpoints of trained models are not listed here: the chat endpoint finds them in the store and
names their folder in the request (:class:`~.request.Weights`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .device import Placement
from .engine import ENGINE_THREADS, Engine
from .model import BaseModelSpec
from .request import Weights
from .resources import LORA_BYTES
from .sources import AdapterSource, BaseModelError
from .status import EngineStatus


@dataclass(frozen=True)
class NamedAdapter:
    """An adapter served under a name of its own, on the base model of ``engine``."""

    name: str
    folder: Path
    engine: Engine

    @property
    def weights(self) -> Weights:
        return Weights(f"lora:{self.name}", self.folder)


@dataclass(frozen=True)
class BaseStatus:
    """One base model as the health check reports it."""

    spec: BaseModelSpec
    engine: EngineStatus


class ServedModels:
    """The base models (the first is the default one) and the named adapters."""

    def __init__(
        self,
        specs: list[BaseModelSpec],
        adapters: list[AdapterSource] | None = None,
        *,
        placement: Placement | None = None,
        max_num_seqs: int = 32,
        priority_scheduling: bool = False,
        lora_bytes: int = LORA_BYTES,
        threads: int = ENGINE_THREADS,
        enable_prefix_caching: bool = True,
        enforce_eager: bool = False,
        kv_cache_bytes: int | None = None,
        max_model_len: int | None = None,
    ) -> None:
        if not specs:
            raise BaseModelError("no base model to serve")
        self._engines: dict[str, Engine] = {}
        for spec in specs:
            engine = Engine.for_model(
                spec,
                max_num_seqs=max_num_seqs,
                priority_scheduling=priority_scheduling,
                threads=threads,
                placement=placement,
                lora_bytes=lora_bytes,
                enable_prefix_caching=enable_prefix_caching,
                enforce_eager=enforce_eager,
                kv_cache_bytes=kv_cache_bytes,
                max_model_len=max_model_len,
            )
            for name in spec.names:
                if name in self._engines:
                    raise BaseModelError(f"the name {name!r} is given to two base models")
                self._engines[name] = engine
        self.default: Engine = self._engines[specs[0].name]
        self.adapters: dict[str, NamedAdapter] = {}
        for source in adapters or []:
            base = self._engines.get(source.base or self.default.spec.name)
            if base is None:
                raise BaseModelError(f"--lora-modules {source.name}: no base model is called {source.base!r}")
            if source.name in self._engines or source.name in self.adapters:
                raise BaseModelError(f"--lora-modules {source.name}: the name is already served")
            self.adapters[source.name] = NamedAdapter(source.name, source.folder, base)

    @property
    def engines(self) -> list[Engine]:
        """One engine per base model, the default first."""
        return list({id(e): e for e in self._engines.values()}.values())

    @property
    def specs(self) -> dict[str, BaseModelSpec]:
        """Every served base name (aliases included) and its model."""
        return {name: engine.spec for name, engine in self._engines.items()}

    def engine(self, name: str) -> Engine | None:
        """The engine serving the base model called ``name`` (any of its names)."""
        return self._engines.get(name)

    def status(self) -> list[BaseStatus]:
        return [BaseStatus(e.spec, e.status) for e in self.engines]

    def start(self) -> None:
        for engine in self.engines:
            engine.start()

    def stop(self) -> None:
        for engine in self.engines:
            engine.stop()
