"""A step that fails never leaves a request waiting: the sequences it had already ended, whose
``Finished`` was not sent yet, fail with the running ones (a token's check failing for a later
sequence, a finish failing, a beam's finish failing); and an admission failing partway gives back the
adapter users counted for the requests it had not placed, so the adapter can make room for another.
The faults are made on purpose; a request left waiting fails the test by a timeout."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from support.model_folders import write_adapter, write_folder
from toolkit.server.engine import admission as admission_module
from toolkit.server.engine import engine as engine_module
from toolkit.server.engine.beam import BeamJob
from toolkit.server.engine.codec import Codec
from toolkit.server.engine.engine import Engine
from toolkit.server.engine.events import Event, Failed, Finished
from toolkit.server.engine.model import from_folder
from toolkit.server.engine.request import BeamParams, Request, Weights
from toolkit.server.engine.running import Sequence
from toolkit.server.engine.sampling import SamplingParams

TIMEOUT = 60.0  # seconds a request may wait for its end: one left waiting fails, never hangs


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("qwen3")
    write_folder(folder, "qwen3")
    return folder


def request(
    engine: Engine, name: str, tokens: int, weights: Weights = Weights("base"), beam: int = 0
) -> Request:
    params = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True)
    prompt = engine.codec.encode("hello")
    beams = BeamParams(beam) if beam else None
    return Request(name, weights, prompt, [params] * (beam or 1), [None], stream=True, beam=beams)


async def end(queue: asyncio.Queue[Event]) -> Event:
    """The request's first ``Finished`` or ``Failed``."""
    while True:
        event = await asyncio.wait_for(queue.get(), TIMEOUT)
        if isinstance(event, Finished | Failed):
            return event


async def test_a_token_check_failing_fails_the_sequences_it_ended(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = Engine.for_model(from_folder(base))
    short, long = request(engine, "short", 2), request(engine, "long", 8)
    ended: list[str] = []
    real_append = engine_module.append

    def append(seq: Sequence, token: int, max_model_len: int) -> bool:
        done = real_append(seq, token, max_model_len)
        if done:
            ended.append(seq.req.id)
        if seq.req is long and len(seq.output_ids) == 2:  # the decode step that ended `short`
            raise RuntimeError("a broken token check")
        return done

    monkeypatch.setattr(engine_module, "append", append)
    queues = [engine.submit(short), engine.submit(long)]  # before the start: one batch, short first
    engine.start()
    try:
        assert [type(await end(q)) for q in queues] == [Failed, Failed]
        assert ended == ["short"]  # ended in the failed step, before the failure
        following = await end(engine.submit(request(engine, "following", 3)))
        assert isinstance(following, Finished) and len(following.token_ids) == 3
    finally:
        engine.stop()


async def test_a_finish_failing_fails_it_and_those_after_it(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = Engine.for_model(from_folder(base))
    first, second = request(engine, "first", 2), request(engine, "second", 2)
    real_finish = engine_module.finish

    def finish(seq: Sequence, codec: Codec) -> None:
        if seq.req is first:
            raise RuntimeError("a broken finish")
        real_finish(seq, codec)

    monkeypatch.setattr(engine_module, "finish", finish)
    queues = [engine.submit(first), engine.submit(second)]  # both end in the same step, first first
    engine.start()
    try:
        assert [type(await end(q)) for q in queues] == [Failed, Failed]
        following = await end(engine.submit(request(engine, "following", 3)))
        assert isinstance(following, Finished) and len(following.token_ids) == 3
    finally:
        engine.stop()


async def test_a_beam_search_whose_finish_fails_fails(base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def finish(job: BeamJob) -> None:
        raise RuntimeError("a broken beam finish")

    monkeypatch.setattr(BeamJob, "finish", finish)
    engine = Engine.for_model(from_folder(base))
    engine.start()
    try:
        assert isinstance(await end(engine.submit(request(engine, "beams", 3, beam=2))), Failed)
        assert engine.status.running == 0
    finally:
        engine.stop()


async def test_an_admission_failing_partway_releases_its_adapter(
    base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Room for one adapter: two requests on adapter ``a`` fail in one admission (the second's
    sequence cannot be made), then a request on adapter ``b`` must evict ``a``."""
    write_adapter(base, tmp_path / "a", seed=1)
    write_adapter(base, tmp_path / "b", seed=2)
    on_a, on_b = (Weights(f"lora:{name}", tmp_path / name) for name in ("a", "b"))
    engine = Engine.for_model(from_folder(base))
    stack = engine.weights.base.adapters
    assert stack is not None
    stack.max_bytes = stack.slot_bytes(4)  # one adapter of rank 4 (write_adapter's)
    placed, unplaced = request(engine, "placed", 3, on_a), request(engine, "unplaced", 3, on_a)
    real_sequence = admission_module.Sequence

    def sequence(req: Request, *args: Any) -> Sequence:
        if req is unplaced:
            raise RuntimeError("a broken admission")
        return real_sequence(req, *args)

    monkeypatch.setattr(admission_module, "Sequence", sequence)
    queues = [engine.submit(placed), engine.submit(unplaced)]  # before the start: one admission
    engine.start()
    try:
        assert [type(await end(q)) for q in queues] == [Failed, Failed]
        on_b_answer = await end(engine.submit(request(engine, "on b", 3, on_b)))
        assert isinstance(on_b_answer, Finished) and len(on_b_answer.token_ids) == 3
        assert engine.status.adapters == 1  # a left for b
    finally:
        engine.stop()
