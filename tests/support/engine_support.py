"""Requests straight to an in-process :class:`~toolkit.server.engine.engine.Engine`, no HTTP."""

from __future__ import annotations

import asyncio

from toolkit.server.engine.engine import Engine
from toolkit.server.engine.events import Failed, Finished
from toolkit.server.engine.request import Request, Weights
from toolkit.server.engine.sampling import SamplingParams


def generate(
    engine: Engine, requests: list[tuple[Weights, list[int]]], params: list[SamplingParams]
) -> list[list[int]]:
    """The token ids of each (weights, prompt) with its ``params``, all submitted at once."""

    async def one(i: int, weights: Weights, prompt: list[int], p: SamplingParams) -> list[int]:
        queue = engine.submit(Request(f"r{i}", weights, prompt, [p], [None], stream=False))
        while True:
            event = await queue.get()
            if isinstance(event, Failed):
                raise event.error
            if isinstance(event, Finished):
                return event.token_ids

    async def every() -> list[list[int]]:
        return list(
            await asyncio.gather(
                *(one(i, w, x, p) for i, ((w, x), p) in enumerate(zip(requests, params, strict=True)))
            )
        )

    return asyncio.run(every())


def greedy_params(tokens: int) -> SamplingParams:
    """``tokens`` new tokens at temperature 0, past any end of text."""
    return SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True)
