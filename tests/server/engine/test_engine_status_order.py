"""The engine's status snapshot (what ``/v1/health`` publishes) is refreshed before a request's
``Finished`` leaves the engine: a client that got an answer never reads an older state. The engine's
thread calls the sink, so reading :attr:`Engine.status` inside it sees exactly what the event loop
could publish when the answer arrives; one-token requests finish in the iteration that admits them,
the case that used to publish the state from before the request."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from support.model_folders import write_adapter, write_folder
from toolkit.server.engine.engine import Engine
from toolkit.server.engine.events import Event, Failed, Finished
from toolkit.server.engine.model import from_folder
from toolkit.server.engine.request import BeamParams, Request, Weights
from toolkit.server.engine.sampling import SamplingParams
from toolkit.server.engine.status import EngineStatus

PROMPT = [256, 97, 98, 99]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("qwen3")
    write_folder(folder, "qwen3")
    write_adapter(folder, folder.parent / "adapter", seed=3)
    return folder


@dataclass
class Watched(Request):
    """A request that reads its engine's status as each ``Finished`` leaves the engine's thread
    (every event goes through ``emit``; this one is in place before the request is submitted, so
    none can pass unread)."""

    engine: Engine | None = None
    seen: list[EngineStatus] = field(default_factory=list)

    def emit(self, event: Event) -> None:
        if isinstance(event, Finished) and self.engine is not None:
            self.seen.append(self.engine.status)
        super().emit(event)


def one_token(engine: Engine, weights: Weights, beam: BeamParams | None = None) -> Watched:
    params = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)
    return Watched("r", weights, list(PROMPT), [params], [None], stream=False, beam=beam, engine=engine)


async def statuses_at_finish(engine: Engine, req: Watched) -> list[EngineStatus]:
    """The engine's status as each of ``req``'s ``Finished`` events left its thread."""
    queue = engine.submit(req)
    remaining = req.beam.width if req.beam else len(req.params)
    while remaining:
        event = await asyncio.wait_for(queue.get(), 60)
        assert not isinstance(event, Failed), event.error
        remaining -= isinstance(event, Finished)
    return req.seen


def test_the_status_is_refreshed_before_each_finished_is_emitted(base: Path) -> None:
    adapter = Weights("lora:adapter", base.parent / "adapter")
    engine = Engine.for_model(from_folder(base), threads=1)
    assert engine.status.loaded is False and engine.status.adapters == 0
    engine.start()
    try:
        for i in range(1, 21):  # before the fix, each read missed the request just answered
            (plain,) = asyncio.run(statuses_at_finish(engine, one_token(engine, Weights("base"))))
            assert plain.loaded and plain.running == 0 and plain.prompt_tokens == i * len(PROMPT)
        (lora,) = asyncio.run(statuses_at_finish(engine, one_token(engine, adapter)))
        beams = asyncio.run(statuses_at_finish(engine, one_token(engine, adapter, BeamParams(width=2))))
    finally:
        engine.stop()
    assert lora.adapters == 1 and lora.adapter_bytes > 0 and lora.running == 0
    assert lora.prompt_tokens == 21 * len(PROMPT)
    assert len(beams) == 2 and all(s.loaded and s.running == 0 and s.adapters == 1 for s in beams)
