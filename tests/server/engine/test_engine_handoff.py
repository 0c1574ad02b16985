"""The hand-off between the engine thread and the event loops that wait for its events: a request
whose loop has closed is dropped without failing the others, the engine thread outlives a failure
while failing the running requests, and every submitted request is listed for the watchdog until its
caller releases it."""

from __future__ import annotations

import asyncio
import threading

import pytest

from toolkit.server.engine.engine import Engine
from toolkit.server.engine.events import Event, Failed, Finished
from toolkit.server.engine.model import BaseModelSpec, ensure_builtin
from toolkit.server.engine.request import Request, Weights
from toolkit.server.engine.sampling import SamplingParams


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> BaseModelSpec:
    return ensure_builtin(tmp_path_factory.mktemp("handoff"))


def request(engine: Engine, tokens: int) -> Request:
    params = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True)
    return Request("r", Weights("base"), engine.codec.encode("hello"), [params], [None], stream=True)


async def finished(queue: asyncio.Queue[Event]) -> Event:
    while True:
        event = await asyncio.wait_for(queue.get(), 60)
        if isinstance(event, Finished | Failed):
            return event


async def test_a_closed_loop_drops_its_request_and_the_others_finish(spec: BaseModelSpec) -> None:
    engine = Engine.for_model(spec)
    engine.start()
    try:
        orphan = request(engine, 900)

        async def submit() -> None:
            engine.submit(orphan)

        def submit_and_close() -> None:  # a loop that submits, then stops and closes at once
            loop = asyncio.new_event_loop()
            loop.run_until_complete(submit())
            loop.close()

        thread = threading.Thread(target=submit_and_close)
        thread.start()
        thread.join()
        mine = request(engine, 8)
        event = await finished(engine.submit(mine))
        assert isinstance(event, Finished) and len(event.token_ids) == 8
        assert orphan.cancelled  # its events had nowhere to go: dropped, the engine went on
        assert engine._thread.is_alive()
    finally:
        engine.stop()


async def test_the_engine_thread_outlives_a_failure_of_failing(
    spec: BaseModelSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = Engine.for_model(spec)
    calls = {"iterate": 0}
    real_iterate = engine._iterate

    def iterate_once_broken() -> None:
        calls["iterate"] += 1
        real_iterate()
        if calls["iterate"] == 1:
            raise RuntimeError("a broken step")

    def fail_all_broken(exc: BaseException) -> None:
        raise RuntimeError("failing the running requests failed too")

    monkeypatch.setattr(engine, "_iterate", iterate_once_broken)
    monkeypatch.setattr(engine, "_fail_all", fail_all_broken)
    first = request(engine, 4)
    engine.submit(first)
    engine.start()
    try:
        await asyncio.sleep(0.5)
        assert engine._thread.is_alive()
        assert first in engine.live()  # still listed for the watchdog: nothing lost track of it
        engine.release(first, cancel=True)  # its failure was never sent: its caller gives up
        second = request(engine, 4)
        event = await finished(engine.submit(second))
        assert isinstance(event, Finished) and len(event.token_ids) == 4
    finally:
        engine.stop()


async def test_submitted_requests_are_live_until_released(spec: BaseModelSpec) -> None:
    engine = Engine.for_model(spec)
    engine.start()
    try:
        req = request(engine, 3)
        queue = engine.submit(req)
        assert engine.live() == [req]
        assert isinstance(await finished(queue), Finished)
        assert engine.live() == [req] and req.emitted >= 2  # finished, but its caller has not let go
        assert any(f"request {req.id}" in line for line in engine.describe())
        engine.release(req, cancel=False)
        assert engine.live() == [] and not req.cancelled
    finally:
        engine.stop()


async def test_decoding_a_non_streamed_request_is_progress(spec: BaseModelSpec) -> None:
    """A non-streamed request sends no event between its start and its end: each token sampled for
    it is its progress (what the watchdog reads), and a queued one moves with its engine."""
    engine = Engine.for_model(spec)
    engine.start()
    try:
        params = SamplingParams(max_tokens=400, temperature=0.0, ignore_eos=True)
        req = Request("quiet", Weights("base"), engine.codec.encode("hello"), [params], [None], stream=False)
        queue = engine.submit(req)
        assert engine.progressed_at(req) >= req.arrival  # queued: its engine's latest step or arrival
        seen = set()
        while req.emitted < 2:  # until Finished: Started is the only event before
            if req.stepped_at is not None:
                seen.add(req.stepped_at)
            await asyncio.sleep(0.001)
        assert len(seen) >= 2 and engine.progressed_at(req) == req.progressed_at >= max(seen)
        assert isinstance(await finished(queue), Finished)
    finally:
        engine.stop()
