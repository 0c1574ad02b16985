"""While transformers builds a model in bfloat16 (a GPU's placement, ``--dtype bfloat16``) it sets
torch's default dtype for the whole process (its ``local_torch_dtype``), so a tensor another thread
makes without a dtype meanwhile is bfloat16: the engine's sampler and the trainer's batches name
float32 wherever they mean it, and give the same numbers under either default."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar

import torch
from test_engine_units import Row

from toolkit.server.engine.sampling import DeviceRandom, SamplingParams, StepResult, race_noise, sample
from toolkit.server.training.forward import Batch, make_batch
from toolkit.server.training.sequences import Sample

V = 260
ROWS = 32
T = TypeVar("T")


def under(dtype: torch.dtype, make: Callable[[], T]) -> T:
    """What ``make()`` gives while torch's default dtype is ``dtype``."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        return make()
    finally:
        torch.set_default_dtype(before)


def rows(**settings: float) -> list[Row]:
    """One row per seed, sampled at temperature 1 with ``settings``."""
    return [
        Row(SamplingParams(max_tokens=4, seed=seed, logprobs=1, **settings), seed=seed)  # type: ignore[arg-type]
        for seed in range(ROWS)
    ]


def test_the_race_noise_is_float32_and_the_same_under_a_bfloat16_default() -> None:
    shape, sampled = torch.Size((ROWS, V)), [True] * ROWS
    plain = race_noise(shape, rows(), sampled, torch.Generator().manual_seed(1))
    during = under(
        torch.bfloat16, lambda: race_noise(shape, rows(), sampled, torch.Generator().manual_seed(1))
    )
    device = under(torch.bfloat16, lambda: DeviceRandom(torch.device("cpu")).noise(shape, rows(), sampled))
    assert plain.dtype == during.dtype == device.dtype == torch.float32
    assert torch.equal(plain, during)


def test_min_p_keeps_its_float32_value_under_a_bfloat16_default() -> None:
    """Token 1 is 0.10005 times as likely as token 0: ``min_p=0.1`` keeps it, as its bfloat16
    value (0.10009766) would not; over 32 seeds it wins some draws under either default."""
    logits = torch.full((ROWS, V), -float("inf"))
    logits[:, 0], logits[:, 1] = 0.0, math.log(0.10005)

    def step() -> StepResult:
        return sample(logits.clone(), rows(min_p=0.1), torch.Generator().manual_seed(1))

    plain, during = step(), under(torch.bfloat16, step)
    assert 1 in plain.tokens
    assert (during.tokens, during.logprobs, during.top) == (plain.tokens, plain.logprobs, plain.top)


def test_a_training_batch_is_float32_under_a_bfloat16_default() -> None:
    logprobs = [-0.123456789, -1.0000001, -2.718281828]

    def batch() -> Batch:
        samples = [Sample([5, 6, 7], [False, True, True], logprobs, advantage=0.3333333, weight=0.7)]
        return make_batch(samples, pad_id=0)

    plain, during = batch(), under(torch.bfloat16, batch)
    for name in ("mask", "logprobs", "advantages", "weights"):
        assert getattr(during, name).dtype == torch.float32, name
        assert torch.equal(getattr(during, name), getattr(plain, name)), name
