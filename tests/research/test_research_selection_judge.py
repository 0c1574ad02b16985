"""Unit level: the best-of-group filter, and the judge's prompt, schema and answer checks (a fake chat
client records the request; the real endpoint is exercised in test_research_server.py)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from toolkit import research
from toolkit.research.judge import JudgeError, judge_group, parse_scores
from toolkit.types.training import Trajectory, TrajectoryGroup


def answer(text: str, reward: float = 0.0) -> Trajectory:
    return Trajectory.model_validate(
        {
            "messages_and_choices": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "reverse cat"},
                {"message": {"role": "assistant", "content": text}, "finish_reason": "stop"},
            ],
            "reward": reward,
        }
    )


def group(*rewards: float) -> TrajectoryGroup:
    return TrajectoryGroup(trajectories=[answer(f"a{i}", r) for i, r in enumerate(rewards)])


def contents(groups: list[TrajectoryGroup]) -> list[list[str | None]]:
    return [[t.choices()[0].message.content for t in g.trajectories] for g in groups]


def test_best_of_groups_top_k_min_reward_and_zero_std() -> None:
    groups = [group(0.2, 0.9, 0.5), group(1.0, 1.0), group(0.1, 0.0)]
    assert contents(research.best_of_groups(groups)) == [["a1"], ["a0"], ["a0"]]
    assert contents(research.best_of_groups(groups, top_k=2)) == [["a1", "a2"], ["a0", "a1"], ["a0", "a1"]]
    assert contents(research.best_of_groups(groups, min_reward=0.5)) == [["a1"], ["a0"]]
    assert contents(research.best_of_groups(groups, drop_zero_std=True)) == [["a1"], ["a0"]]
    assert [t.reward for t in groups[0].trajectories] == [0.2, 0.9, 0.5]  # the input is unchanged
    with pytest.raises(ValueError, match="top_k"):
        research.best_of_groups(groups, top_k=0)


def test_sft_from_best_refuses_an_empty_selection() -> None:
    with pytest.raises(ValueError, match="nothing to train on"):
        research.sft_from_best(None, "model", [group(0.1)], min_reward=1.0)  # type: ignore[arg-type]


class FakeChat:
    """``client.chat.completions.create`` answering ``reply(n)`` for a request scoring n trajectories."""

    def __init__(self, reply: Any) -> None:
        self.reply = reply
        self.requests: list[dict[str, Any]] = []
        self.chat = SimpleNamespace(completions=self)

    def create(self, **request: Any) -> Any:
        self.requests.append(request)
        n = len(request["response_format"]["json_schema"]["schema"]["required"])
        message = SimpleNamespace(content=self.reply(n))
        return SimpleNamespace(choices=[SimpleNamespace(message=message)])


def scores(*values: float) -> Any:
    return lambda n: json.dumps({str(i + 1): {"explanation": "ok", "score": v} for i, v in enumerate(values)})


def test_judge_sends_the_shared_prefix_once_and_identical_trajectories_once() -> None:
    fake = FakeChat(scores(0.9, 0.1))
    g = TrajectoryGroup(trajectories=[answer("tac", 1.0), answer("cat"), answer("tac", 0.5)])
    judged = judge_group(fake, g, model="judge")  # type: ignore[arg-type]
    (request,) = fake.requests
    prompt = request["messages"][1]["content"]
    assert prompt.count("reverse cat") == 1 and prompt.startswith("<context>")
    assert prompt.count("<trajectory id=") == 2 and '"tac"' in prompt and '"cat"' in prompt
    assert request["response_format"]["json_schema"]["schema"]["required"] == ["1", "2"]
    assert [t.reward for t in judged.trajectories] == [0.9, 0.1, 0.9]
    assert [t.metrics["independent_reward"] for t in judged.trajectories] == [1.0, 0.0, 0.5]
    assert [t.reward for t in g.trajectories] == [1.0, 0.0, 0.5]


def test_a_group_of_identical_trajectories_is_judged_once() -> None:
    fake = FakeChat(scores(0.4))
    judged = judge_group(fake, TrajectoryGroup(trajectories=[answer("x"), answer("x")]))  # type: ignore[arg-type]
    assert fake.requests[0]["response_format"]["json_schema"]["schema"]["required"] == ["1"]
    assert [t.reward for t in judged.trajectories] == [0.4, 0.4]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "not JSON"),
        (json.dumps({"1": {"explanation": "", "score": 0.5}}), "expected the 2 trajectories"),
        (json.dumps({str(i): {"explanation": "", "score": 0.5} for i in (1, 2, 3)}), "expected the 2"),
        (json.dumps({"1": {"explanation": "", "score": 2}, "2": {"score": 0.1}}), "from 0 to 1"),
        (json.dumps({"1": {"explanation": ""}, "2": {"score": 0.1}}), "from 0 to 1"),
    ],
)
def test_an_answer_that_does_not_score_each_trajectory_is_an_error(text: str, message: str) -> None:
    with pytest.raises(JudgeError, match=message):
        parse_scores(text, 2)
    fake = FakeChat(lambda n: text)
    with pytest.raises(JudgeError):
        judge_group(fake, TrajectoryGroup(trajectories=[answer("a"), answer("b")]))  # type: ignore[arg-type]
