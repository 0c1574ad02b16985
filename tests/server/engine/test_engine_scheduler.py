"""The engine's scheduler without HTTP: requests in, events out on the caller's event loop; the torch
thread count it runs with (set in its own thread, not in the caller's); the device it reports; beam
search. (Its KV cache: test_engine_kv_cache.py.)"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import torch

from toolkit.server.engine.engine import ENGINE_THREADS, Engine
from toolkit.server.engine.events import Event, Failed, Finished, Started
from toolkit.server.engine.model import BaseModelSpec, ensure_builtin
from toolkit.server.engine.request import BeamParams, Request, Weights
from toolkit.server.engine.resources import SERIAL_WORK
from toolkit.server.engine.sampling import SamplingParams
from toolkit.server.engine.template import render_chat

MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> BaseModelSpec:
    return ensure_builtin(tmp_path_factory.mktemp("engine"))


@pytest.fixture
def caller_threads() -> Iterator[int]:
    """This thread runs torch on 1 thread during the test (restored after)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield 1
    torch.set_num_threads(before)


def request(engine: Engine, params: SamplingParams, beam: BeamParams | None = None) -> Request:
    prompt = render_chat(
        engine.spec.chat_template, MESSAGES, add_generation_prompt=True, continue_final_message=False
    )
    return Request(
        id="r1",
        weights=Weights("base"),
        prompt_ids=engine.codec.encode(prompt),
        params=[params],
        guides=[None],
        stream=False,
        beam=beam,
    )


async def run(engine: Engine, req: Request) -> list[Event]:
    """Every event of ``req`` until each of its choices finished."""
    queue = engine.submit(req)
    events: list[Event] = []
    remaining = req.beam.width if req.beam else len(req.params)
    while remaining:
        event = await queue.get()
        assert not isinstance(event, Failed), event.error
        events.append(event)
        remaining -= isinstance(event, Finished)
    return events


async def test_torch_threads_are_set_in_the_engine_thread_not_the_callers(
    spec: BaseModelSpec, caller_threads: int
) -> None:
    """The prefill of a long prompt runs on the engine's threads, each one-row decode step of the
    1M-parameter model on one (``SERIAL_WORK``); the caller's count never changes."""
    seen: list[tuple[str, int]] = []

    def record(output: list[int], logits: torch.Tensor) -> torch.Tensor:
        seen.append((threading.current_thread().name, torch.get_num_threads()))
        return logits

    engine = Engine.for_model(spec, threads=3)
    assert torch.get_num_threads() == caller_threads  # constructing the engine changed nothing here
    params = SamplingParams(max_tokens=3, ignore_eos=True, logits_processors=[record])
    req = request(engine, params)
    req.prompt_ids = engine.codec.encode("a long prompt " * 20)
    engine.start()
    try:
        events = await run(engine, req)
    finally:
        engine.stop()
    assert (
        engine.weights.base.parameters * len(req.prompt_ids) >= SERIAL_WORK > engine.weights.base.parameters
    )
    assert isinstance(events[0], Started)
    finished = events[-1]
    assert isinstance(finished, Finished) and len(finished.token_ids) == 3
    assert seen == [("toolkit-engine", 3), ("toolkit-engine", 1), ("toolkit-engine", 1)]
    assert torch.get_num_threads() == caller_threads


async def test_device_and_beam_search_through_the_scheduler(spec: BaseModelSpec) -> None:
    engine = Engine.for_model(spec, threads=ENGINE_THREADS + 1)
    assert engine.device == torch.device("cpu") and isinstance(engine.device, torch.device)
    assert engine.threads == ENGINE_THREADS + 1  # the count it was given, not the default
    engine.start()
    try:
        greedy = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
        events = await run(engine, request(engine, greedy, beam=BeamParams(width=2)))
    finally:
        engine.stop()
    beams = [e for e in events if isinstance(e, Finished)]
    assert sorted(b.index for b in beams) == [0, 1]
    assert all(len(b.token_ids) == 4 for b in beams) and beams[0].token_ids != beams[1].token_ids
