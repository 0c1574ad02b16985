"""Prompt prefixes shared by the requests admitted together: prefilled once, same tokens as unshared.

In the engine's own tests the requests are queued before it starts, so its first pass admits them
all at once (what the concurrent requests of a group rollout do when they arrive during one step);
the last tests send group rollouts over HTTP."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from conftest import LocalServer
from support.chat_helpers import chat
from toolkit.server.engine.engine import Engine
from toolkit.server.engine.events import Failed, Finished, Started
from toolkit.server.engine.kv_pool import BLOCK
from toolkit.server.engine.model import BaseModelSpec, ensure_builtin
from toolkit.server.engine.request import Request, Weights
from toolkit.server.engine.sampling import SamplingParams


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> BaseModelSpec:
    return ensure_builtin(tmp_path_factory.mktemp("sharing"))


def prompt(engine: Engine, text: str) -> list[int]:
    return engine.codec.encode(text)


def request(ids: list[int], scope: str = "u|", n: int = 1, prompt_logprobs: int | None = None) -> Request:
    params = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
    return Request(
        id="r",
        weights=Weights("base"),
        prompt_ids=ids,
        params=[params] * n,
        guides=[None] * n,
        stream=False,
        cache_scope=scope,
        prompt_logprobs=prompt_logprobs,
    )


async def admitted_together(engine: Engine, reqs: list[Request]) -> list[tuple[int, list[list[int]]]]:
    """Submit ``reqs`` before the engine runs; each one's cached tokens and choices' tokens."""
    queues = [engine.submit(r) for r in reqs]
    engine.start()
    try:
        out = []
        for req, queue in zip(reqs, queues, strict=True):
            cached, tokens = -1, {}
            while len(tokens) < len(req.params):
                event = await asyncio.wait_for(queue.get(), 60)
                assert not isinstance(event, Failed), event.error
                if isinstance(event, Started):
                    cached = event.cached_tokens
                elif isinstance(event, Finished):
                    tokens[event.index] = event.token_ids
            out.append((cached, [tokens[i] for i in sorted(tokens)]))
        return out
    finally:
        engine.stop()


async def test_eight_requests_with_one_prompt_prefill_it_once(spec: BaseModelSpec) -> None:
    shared = Engine.for_model(spec)
    ids = prompt(shared, "A shared system prompt for every rollout of the group. " * 6)
    assert len(ids) > 300
    results = await admitted_together(shared, [request(ids) for _ in range(8)])
    assert [cached for cached, _ in results] == [0] + [len(ids) - 1] * 7
    assert shared.status.prompt_tokens == 8 * len(ids)
    assert shared.status.prefilled_tokens == len(ids) + 7

    alone = Engine.for_model(spec, enable_prefix_caching=False)
    unshared = await admitted_together(alone, [request(ids) for _ in range(8)])
    assert alone.status.prefilled_tokens == 8 * len(ids)
    assert [cached for cached, _ in unshared] == [0] * 8
    assert [tokens for _, tokens in results] == [tokens for _, tokens in unshared]


async def test_a_common_prefix_is_copied_and_only_the_rest_prefilled(spec: BaseModelSpec) -> None:
    engine = Engine.for_model(spec)
    head = prompt(engine, "The same instructions for each task of the batch. " * 4)
    tails = [prompt(engine, f" Task {i}: reverse the word number {i}.") for i in range(3)]

    def batch() -> list[Request]:
        return [
            request(head + tails[0]),
            request(head + tails[1], n=3),  # its three choices share its own prefill
            request(head + tails[2], scope="other|"),  # another user or cache_salt: nothing shared
            request(head + tails[0], prompt_logprobs=1),  # needs every prompt position's logits
        ]

    reqs = batch()
    results = await admitted_together(engine, reqs)
    cached = [c for c, _ in results]
    assert cached[0] == 0 and cached[2] == 0 and cached[3] == 0
    assert len(head) <= cached[1] < len(head) + len(tails[1])
    lengths = [len(r.prompt_ids) for r in reqs]
    assert engine.status.prefilled_tokens == sum(lengths) - cached[1]

    plain = Engine.for_model(spec, enable_prefix_caching=False)
    assert [t for _, t in await admitted_together(plain, batch())] == [t for _, t in results]


async def test_a_later_request_reuses_the_cached_blocks(spec: BaseModelSpec) -> None:
    engine = Engine.for_model(spec)
    ids = prompt(engine, "One prompt sent twice, one request after the other. " * 3)
    engine.start()
    try:
        cached = []
        for _ in range(2):
            queue = engine.submit(request(ids))
            while not isinstance(event := await asyncio.wait_for(queue.get(), 60), Finished):
                if isinstance(event, Started):
                    cached.append(event.cached_tokens)
    finally:
        engine.stop()
    assert cached == [0, (len(ids) - 1) // BLOCK * BLOCK]
    assert engine.status.prefilled_tokens == 2 * len(ids) - cached[1]


def prefilled(http: httpx.Client) -> int:
    return int(http.get("/v1/health").json()["models"][0]["prefilled_tokens"])


def test_group_rollouts_over_http_prefill_their_prompt_once(http: httpx.Client) -> None:
    """A group as ``n``=8 and as 8 concurrent requests: the engine's counter of prompt tokens run
    through the model grows by one prompt (and, for the requests, the few tokens after the last
    shared block), and ``cached_tokens`` reports the rest."""

    def group_prompt() -> list[dict[str, str]]:
        return [{"role": "user", "content": uuid.uuid4().hex + " Reverse each word you are given. " * 8}]

    body = {"max_tokens": 4, "temperature": 1.0, "ignore_eos": True}
    before = prefilled(http)
    group = chat(http, messages=group_prompt(), n=8, **body)
    length = group["usage"]["prompt_tokens"]
    assert len(group["choices"]) == 8 and length > 250
    assert prefilled(http) - before == length

    messages = group_prompt()
    before = prefilled(http)
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: chat(http, messages=messages, **body), range(8)))
    computed = sum(
        a["usage"]["prompt_tokens"] - a["usage"]["prompt_tokens_details"]["cached_tokens"] for a in answers
    )
    assert computed <= length + 7 * BLOCK  # against 8 x length without sharing
    assert prefilled(http) - before == computed


@pytest.fixture(scope="module")
def uncached_random_http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """A server of the random-init built-in model with the prefix cache off."""
    args = ("--base-model", "toolkit/tiny-random-1m", "--no-enable-prefix-caching")
    srv = LocalServer(tmp_path_factory.mktemp("uncached"), extra_args=args).start()
    try:
        with srv.http() as client:
            yield client
    finally:
        srv.stop()


def test_a_seeded_group_is_the_same_with_the_prefix_cache_on_and_off(
    random_http: httpx.Client, uncached_random_http: httpx.Client
) -> None:
    """A seeded ``n``=8 request at T=1 to a server with the prefix cache on, then to one with it off: the
    same tokens and logprobs (its prompt is new: nothing to reuse, its blocks stored). Sent again
    to the first, it reuses the cached blocks (in the KV cache the first request left): the same
    tokens, and logprobs within float32 rounding (its prefill runs the last 3 prompt tokens, not all
    323: other matmul shapes)."""
    messages = [{"role": "user", "content": uuid.uuid4().hex + " Reverse each word you are given. " * 8}]
    body = {"messages": messages, "n": 8, "max_tokens": 24, "temperature": 1.0, "seed": 11}
    body |= {"ignore_eos": True, "logprobs": True, "top_logprobs": 2, "return_token_ids": True}

    def tokens(answer: dict[str, Any]) -> list[list[int]]:
        return [c["token_ids"] for c in answer["choices"]]

    def logprobs(answer: dict[str, Any]) -> list[float]:
        return [t["logprob"] for c in answer["choices"] for t in c["logprobs"]["content"]]

    cached, uncached = chat(random_http, **body), chat(uncached_random_http, **body)
    assert cached["usage"]["prompt_tokens"] > 300
    assert len({tuple(t) for t in tokens(cached)}) == 8  # each choice draws its own
    assert tokens(cached) == tokens(uncached)
    assert [c["logprobs"] for c in cached["choices"]] == [c["logprobs"] for c in uncached["choices"]]

    again = chat(random_http, **body)
    prompt = again["usage"]["prompt_tokens"]
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == (prompt - 1) // BLOCK * BLOCK
    assert tokens(again) == tokens(uncached)
    assert logprobs(again) == pytest.approx(logprobs(uncached), abs=1e-5)
