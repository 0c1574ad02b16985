"""The seeded callers of the chat endpoint over the real server at temperature 1: ``ChatCompare``
samples, ``tk.research.evaluate`` and the shipped tasks' scenario draws repeat under one seed."""

from __future__ import annotations

import uuid

from conftest import LocalServer
from toolkit import research, seeding
from toolkit.tasks import lookup, reverse
from toolkit.widgets import ChatCompare

BASE = "toolkit/tiny-chat-1m"


def compare_texts(server: LocalServer, seed: int | None, tools: bool = False) -> list[tuple[str, int, str]]:
    options = {"tools": [lookup.CodeLookup().get], "max_turns": 2} if tools else {}
    compare = ChatCompare(
        server.client(), [BASE, "toolkit/tiny-random-1m"], prompt="code abc", temperature=1.0,
        max_tokens=24, n=3, seed=seed, **options,
    )  # fmt: skip
    compare.run(wait=True)
    frame = compare.frame()
    assert compare.run_settings["seed"] == seed and frame["error"].isna().all()
    compare.close()
    return list(zip(frame["model"], frame["sample"], frame["text"], strict=True))


def test_chat_compare_samples_repeat_under_a_seed(server: LocalServer) -> None:
    first = compare_texts(server, 5)
    assert len(first) == 6 and len({t for *_, t in first}) > 2
    assert compare_texts(server, 5) == first
    assert compare_texts(server, 6) != first
    with_tools = compare_texts(server, 5, tools=True)  # one seeded rollout per sample, turn by turn
    assert compare_texts(server, 5, tools=True) == with_tools


def test_evaluate_repeats_under_a_seed(server: LocalServer) -> None:
    client = server.client()
    model = client.models.create(project="tests-seeds", name=f"eval-{uuid.uuid4().hex[:8]}", base_model=BASE)
    words = reverse.sample_words(6, seed=1, split="eval")

    def run(seed: int) -> list[str]:
        result = research.evaluate(
            client, model.id, words, reverse.rollout, group_size=2, log=False, progress=False, seed=seed
        )
        trajectories = [t for g in result.groups[0] for t in g.trajectories]
        return [c.message.content or "" for t in trajectories for c in t.choices()]

    first = run(3)
    assert run(3) == first and run(4) != first


def test_scenarios_follow_the_given_or_the_default_seed() -> None:
    assert lookup.scenarios(5, seed=2) == lookup.scenarios(5, seed=2) != lookup.scenarios(5, seed=3)
    assert reverse.sample_words(5, seed=2) != reverse.sample_words(5, seed=3)
    with seeding.use_default_seed(1):
        first = (lookup.scenarios(5), reverse.sample_words(5))
        second = lookup.scenarios(5)
    with seeding.use_default_seed(1):
        assert (lookup.scenarios(5), reverse.sample_words(5)) == first
        assert lookup.scenarios(5) == second != first[0]
    draws = {tuple(reverse.sample_words(8)) for _ in range(3)}  # no seed anywhere: fresh draws
    assert len(draws) == 3
