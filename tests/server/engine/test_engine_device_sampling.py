"""Device sampling (``TOOLKIT_DEVICE_SAMPLING``): the engine samples where the logits are, the random
numbers still drawn from each row's CPU generator (seeded rows in threads of their own), or with
``device`` drawn on the device by generators of each request's own. On the CPU both must give exactly
the tokens and logprobs of sampling as before, for every kind of setting."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from test_engine_scheduler import request, run
from test_engine_units import Row

from toolkit.server.engine.codec import Codec
from toolkit.server.engine.engine import Engine
from toolkit.server.engine.events import Finished
from toolkit.server.engine.model import RANDOM_NAME, BaseModelSpec, builtin_spec
from toolkit.server.engine.resources import device_random, device_sampling
from toolkit.server.engine.sampling import DeviceRandom, SamplingParams, race_noise

V = 260
SETTINGS = [
    SamplingParams(max_tokens=12, temperature=1.0, seed=7, logprobs=2),
    SamplingParams(max_tokens=12, temperature=0.7, top_p=0.9, top_k=40, seed=8),
    SamplingParams(max_tokens=12, temperature=1.3, min_p=0.05, repetition_penalty=1.2, seed=9),
    SamplingParams(max_tokens=12, temperature=0.0, presence_penalty=0.5, logprobs=0),
    SamplingParams(max_tokens=12, temperature=1.0, seed=10, logit_bias={65: 3.0}, min_tokens=4),
]


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> BaseModelSpec:
    """The random-init model: its spread-out distributions let each setting change the tokens."""
    return builtin_spec(tmp_path_factory.mktemp("device-sampling"), RANDOM_NAME)


async def finished(engine: Engine, params: list[SamplingParams]) -> list[tuple[list[int], object]]:
    """Each choice's tokens and logprobs, the choices of one request (one batch of rows)."""
    req = request(engine, params[0])
    req.params, req.guides = params, [None] * len(params)
    events = await run(engine, req)
    done = sorted((e for e in events if isinstance(e, Finished)), key=lambda e: e.index)
    return [(e.token_ids, e.logprobs) for e in done]


async def test_on_the_cpu_device_sampling_gives_the_same_tokens_and_logprobs(spec: BaseModelSpec) -> None:
    results = []
    for on, random_on in ((False, False), (True, False), (False, True)):
        engine = Engine(
            spec, Codec.from_folder(spec.folder), threads=1, sample_on_device=on, random_on_device=random_on
        )
        assert engine.sample_on_device is (on or random_on)
        engine.start()
        try:
            results.append(await finished(engine, SETTINGS))
        finally:
            engine.stop()
    off, on_, random_on_ = results
    assert off == on_ == random_on_  # on the CPU a device generator is the CPU generator of that seed
    assert len({tuple(tokens) for tokens, _ in off}) == len(SETTINGS)  # the settings differ in effect


def test_seeded_rows_drawn_in_threads_get_the_numbers_of_their_own_generator() -> None:
    """Rows with a generator of their own draw in the pool, the unseeded ones in order from the
    shared fallback generator: the same numbers as drawing every row in order."""
    params = SamplingParams(max_tokens=1, temperature=1.0)
    seeds = [3, None, 4, 5, None, 6]
    sampled = [True, True, False, True, True, True]

    def draw(pool: ThreadPoolExecutor | None) -> torch.Tensor:
        rows = [Row(params, seed=s) for s in seeds]
        noise = race_noise(torch.Size((len(rows), V)), rows, sampled, torch.Generator().manual_seed(0), pool)
        return noise[torch.tensor(sampled)]

    with ThreadPoolExecutor(3) as pool:
        assert torch.equal(draw(pool), draw(None))
    assert not torch.equal(draw(None)[0], draw(None)[1])


def test_the_setting_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOOLKIT_DEVICE_SAMPLING", raising=False)
    assert device_sampling() is False and device_random() is False  # the CPU's default
    assert device_sampling(cuda=True) is True and device_random(cuda=True) is True  # a GPU's
    monkeypatch.setenv("TOOLKIT_DEVICE_SAMPLING", "0")
    assert device_sampling(cuda=True) is False
    monkeypatch.setenv("TOOLKIT_DEVICE_SAMPLING", "1")
    assert device_sampling() is True
    assert device_random() is False
    monkeypatch.setenv("TOOLKIT_DEVICE_SAMPLING", "device")
    assert device_sampling() is True and device_random() is True
    monkeypatch.setenv("TOOLKIT_DEVICE_SAMPLING", "yes")
    with pytest.raises(ValueError, match="TOOLKIT_DEVICE_SAMPLING must be 0, 1 or device, not 'yes'"):
        device_sampling()


def test_a_seeded_rows_device_numbers_depend_on_its_seed_only() -> None:
    """Drawn on the device, a seeded row gets the same numbers alone or among other rows, at any
    position, and its stream goes on from one step to the next; unseeded rows share one generator."""
    seeded, t1 = Row(SamplingParams(max_tokens=2, temperature=1.0, seed=3)), SamplingParams(max_tokens=2)
    alone = DeviceRandom(torch.device("cpu"))
    first, second = (alone.noise(torch.Size((1, V)), [seeded], [True])[0] for _ in range(2))
    crowd = DeviceRandom(torch.device("cpu"))
    others = [Row(t1), Row(SamplingParams(max_tokens=2, temperature=1.0, seed=4)), Row(t1)]
    batch = [others[0], others[1], seeded, others[2]]
    among = [crowd.noise(torch.Size((4, V)), batch, [True] * 4) for _ in range(2)]
    assert torch.equal(among[0][2], first) and torch.equal(among[1][2], second)
    assert not torch.equal(first, second)
    assert not torch.equal(among[0][0], among[0][3])  # the unseeded rows draw different numbers
