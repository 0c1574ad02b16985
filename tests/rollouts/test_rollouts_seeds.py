"""Seeded gathers over the real server (the built-in model at temperature 1): the same seed gives the
same trajectories (token ids, texts, rewards) whatever order the concurrent requests arrive in; a
different seed gives others; an agent's n-th request of a rollout is seeded ``derive_seed(r, n)``."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest

from conftest import LocalServer
from support.seeded_requests import seeded_requests
from toolkit import seeding
from toolkit.rollouts import Agent, AsyncAgent, gather, gather_async, trajectory
from toolkit.tasks import lookup, reverse
from toolkit.types.training import TrajectoryGroup

BASE = "toolkit/tiny-chat-1m"
LOGPROBS = {"logprobs": True, "return_token_ids": True}
WORDS = ["cat", "dog", "sun", "cat"]  # a word twice: its two groups sample differently (g differs)


def fingerprint(groups: list[TrajectoryGroup]) -> list[list[tuple[Any, ...]]]:
    """Per (group, member): every turn's token ids and text, and the reward."""
    return [
        [
            (
                tuple(tuple(c.token_ids or ()) for c in t.choices()),
                tuple(c.message.content for c in t.choices()),
                t.reward,
            )
            for t in g.trajectories
        ]
        for g in groups
    ]


def jittered(rollout: Any) -> Any:
    """The rollout after a random pause, so that concurrent requests arrive in a shuffled order."""
    shuffle = random.Random()

    def run(scenario: Any) -> Any:
        time.sleep(shuffle.random() * 0.05)
        return rollout(scenario)

    return run


def test_the_same_seed_gives_the_same_trajectories_whatever_the_arrival_order(server: LocalServer) -> None:
    rollout = reverse.rollout(server.client(), BASE)

    def run(seed: int, concurrency: int) -> list[TrajectoryGroup]:
        return gather(
            WORDS, jittered(rollout), group_size=4, max_concurrency=concurrency, progress=False, seed=seed
        )

    one_at_a_time = fingerprint(run(7, 1))
    assert fingerprint(run(7, 16)) == one_at_a_time
    assert fingerprint(run(7, 16)) == one_at_a_time
    different = fingerprint(run(8, 16))
    assert different != one_at_a_time
    tokens = [m[0] for g in one_at_a_time for m in g]
    assert len(set(tokens)) > len(tokens) // 2  # temperature 1: the members of a group differ
    assert one_at_a_time[0] != one_at_a_time[3]  # the same word in another group: other seeds


def test_each_request_carries_the_seed_of_its_rollout_and_rank(server: LocalServer) -> None:
    client = server.client()
    seen: list[tuple[int | None, Any]] = []

    def rollout(word: str) -> Any:
        seen.append((seeding.current_seed(), word))
        return reverse.rollout(client, BASE)(word)

    groups = gather(["cat", "dog"], rollout, group_size=2, max_concurrency=1, progress=False, seed=3)
    assert sorted(seen) == sorted(
        (seeding.derive_seed(3, g, r), w) for g, w in enumerate(["cat", "dog"]) for r in range(2)
    )
    # the rollout's first request asked for derive_seed(rollout seed, 0): the same request alone gives it
    member = groups[1].trajectories[0]
    alone = client.chat.completions.create(
        model=BASE,
        messages=reverse.prompt("dog"),
        temperature=1.0,
        max_tokens=reverse.MAX_TOKENS,
        seed=seeding.derive_seed(seeding.derive_seed(3, 1, 0), 0),
        return_token_ids=True,
    )
    assert alone.choices[0].token_ids == member.choices()[0].token_ids


def test_an_explicit_request_seed_wins(server: LocalServer) -> None:
    client = server.client()

    def rollout(word: str) -> Any:
        messages = reverse.prompt(word)
        completion = client.chat.completions.create(
            model=BASE, messages=messages, temperature=1.0, max_tokens=6, seed=11, **LOGPROBS
        )
        return trajectory(messages, completion, reward=0.0)

    a = gather(["cat"], rollout, group_size=3, seed=1, progress=False)
    b = gather(["cat"], rollout, group_size=3, seed=2, progress=False)
    assert fingerprint(a) == fingerprint(b) and len({m[0] for m in fingerprint(a)[0]}) == 1


def agent(client: Any, cls: type = Agent) -> Any:
    """Two required calls per episode: two seeded requests per rollout."""
    return cls(
        client,
        BASE,
        lookup.CodeLookup,
        max_turns=2,
        tool_choice="required",
        parallel_tool_calls=False,
        temperature=1.0,
        max_tokens=96,
    )


def test_an_agents_turns_are_seeded_in_order(server: LocalServer) -> None:
    client = server.client()
    scenarios = lookup.scenarios(3, seed=5)
    serial = agent(client).gather(scenarios, group_size=2, max_concurrency=1, progress=False, seed=9)
    assert all(len(t.choices()) == 2 for g in serial for t in g.trajectories)
    parallel = agent(client).gather(scenarios, group_size=2, max_concurrency=8, progress=False, seed=9)
    assert fingerprint(parallel) == fingerprint(serial)
    other = agent(client).gather(scenarios, group_size=2, max_concurrency=8, progress=False, seed=10)
    assert fingerprint(other) != fingerprint(serial)


async def test_async_gathers_match_the_threaded_ones(server: LocalServer) -> None:
    scenarios = lookup.scenarios(2, seed=5)
    threaded = agent(server.client()).gather(scenarios, group_size=2, progress=False, seed=9)
    words = gather(WORDS, reverse.rollout(server.client(), BASE), group_size=2, progress=False, seed=4)
    async with server.async_client() as client:
        a = await agent(client, AsyncAgent).gather(
            scenarios, group_size=2, max_concurrency=8, progress=False, seed=9
        )
        b = await gather_async(
            WORDS,
            reverse.async_rollout(client, BASE),
            group_size=2,
            max_concurrency=8,
            progress=False,
            seed=4,
        )
    assert fingerprint(a) == fingerprint(threaded)
    assert fingerprint(b) == fingerprint(words)


def test_an_open_default_seed_seeds_unseeded_calls_in_call_order(server: LocalServer) -> None:
    rollout = reverse.rollout(server.client(), BASE)

    def run() -> tuple[list[str], list[Any], list[Any]]:
        with seeding.use_default_seed(42):
            words = reverse.sample_words(3)
            first = fingerprint(gather(words, rollout, group_size=2, progress=False))
            second = fingerprint(gather(words, rollout, group_size=2, progress=False))
        return words, first, second

    words, first, second = run()
    assert run() == (words, first, second)
    assert first != second  # the k-th call of the experiment: another seed
    assert seeding.default_seed() is None


def test_lookup_success_is_repeatable_with_a_seed(server: LocalServer) -> None:
    """The same episodes (scenarios, requests and sampled tokens) for the same seed, other ones for
    another: the success of the untrained model is 0.0 whatever the seed, so its value alone proves
    nothing."""
    client = server.client()
    first = seeded_requests(lambda: lookup.success(client, BASE, 8, seed=1))
    assert len(first[1]) >= 8 and seeded_requests(lambda: lookup.success(client, BASE, 8, seed=1)) == first
    other = seeded_requests(lambda: lookup.success(client, BASE, 8, seed=2))[1]
    assert sorted(r[2] for r in other) != sorted(r[2] for r in first[1])  # other samples


def test_derive_seed_is_stable_and_typed() -> None:
    assert seeding.derive_seed(1, 2, 3) == 88971787416939586  # the same on every machine
    assert 0 <= seeding.derive_seed("x", 10**30) < 2**63
    assert len({seeding.derive_seed(1), seeding.derive_seed("1"), seeding.derive_seed(1, 0)}) == 3
    assert seeding.derive_seed("ab", "c") != seeding.derive_seed("a", "bc")
    with pytest.raises(TypeError, match="ints and strings"):
        seeding.derive_seed(1.5)  # type: ignore[arg-type]


def test_request_seeds_count_within_a_rollout_only() -> None:
    assert seeding.request_seed() is None and seeding.current_seed() is None
    with seeding.rollout_seed(5):
        assert seeding.current_seed() == 5
        assert [seeding.request_seed() for _ in range(3)] == [seeding.derive_seed(5, n) for n in range(3)]
        with seeding.rollout_seed(None):
            assert seeding.request_seed() is None
    assert seeding.current_seed() is None
