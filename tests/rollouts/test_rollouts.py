"""The rollout loop: trajectories from real completions, gather with errors captured, the wire format,
and the whole loop (roll out, train, roll out the new checkpoint) through the client."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from conftest import LocalServer
from support.training_helpers import answer_logprob, new_model, served
from toolkit.client.sft_data import train_jsonl
from toolkit.client.training_ops import wire
from toolkit.rollouts import (
    MissingTokensWarning,
    exception_record,
    gather,
    gather_async,
    missing_rl_data,
    rl_untrainable,
    trajectory,
)
from toolkit.tasks import reverse
from toolkit.types.training import Choice, Trajectory, TrajectoryGroup


def test_trajectory_from_a_completion_carries_token_ids_and_logprobs(server: LocalServer) -> None:
    client = server.client()
    messages = reverse.prompt("cat")
    completion = client.chat.completions.create(
        model="toolkit/tiny-chat-1m", messages=messages, logprobs=True, return_token_ids=True, max_tokens=4
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", MissingTokensWarning)  # it has what RL trains on: no warning
        made = trajectory(messages, completion, reward=0.25, metadata={"word": "cat"})
    choice = made.messages_and_choices[-1]
    assert isinstance(choice, Choice) and missing_rl_data(made) == []
    assert choice.prompt_token_ids and choice.prompt_token_ids == completion.prompt_token_ids
    assert choice.token_ids and choice.token_ids == completion.choices[0].token_ids
    assert choice.logprobs is not None and choice.logprobs.content
    assert [t.logprob for t in choice.logprobs.content] == [
        t.logprob
        for t in completion.choices[0].logprobs.content or []  # type: ignore[union-attr]
    ]
    assert len(choice.logprobs.content) == len(choice.token_ids)
    body = wire(TrajectoryGroup(trajectories=[made]))
    sent = body["trajectories"][0]
    assert sent["messages_and_choices"][0] == {"role": "user", "content": "reverse cat"}
    assert set(sent["messages_and_choices"][1]) >= {
        "message",
        "logprobs",
        "finish_reason",
        "token_ids",
        "prompt_token_ids",
    }
    assert sent["reward"] == 0.25 and sent["metadata"] == {"word": "cat"}
    assert TrajectoryGroup.model_validate(json.loads(json.dumps(body))) == TrajectoryGroup(
        trajectories=[made]
    )


def test_trajectory_warns_without_logprobs_or_token_ids(server: LocalServer) -> None:
    client = server.client()
    messages = reverse.prompt("cat")
    plain = client.chat.completions.create(model="toolkit/tiny-chat-1m", messages=messages, max_tokens=4)
    with pytest.warns(MissingTokensWarning, match="no logprobs and no token ids: an RL job cannot train"):
        made = trajectory(messages, plain, reward=1.0)
    assert missing_rl_data(made) == ["message 1: no logprobs and no token ids"]
    ids_only = client.chat.completions.create(
        model="toolkit/tiny-chat-1m", messages=messages, max_tokens=4, return_token_ids=True
    )
    with pytest.warns(MissingTokensWarning, match="has no logprobs: "):
        trajectory(messages, ids_only)


def test_rl_untrainable_names_what_an_rl_job_would_refuse() -> None:
    def traj(reward: float, logprobs: bool) -> Trajectory:
        choice = {"message": {"role": "assistant", "content": "x"}, "finish_reason": "stop"}
        if logprobs:
            choice |= {"logprobs": {"content": []}, "token_ids": [1], "prompt_token_ids": [2]}
        return Trajectory.model_validate(
            {"messages_and_choices": [{"role": "user", "content": "q"}, choice], "reward": reward}
        )

    groups = [
        TrajectoryGroup(trajectories=[traj(0.0, False), traj(1.0, True)]),  # one lacks them
        TrajectoryGroup(trajectories=[traj(1.0, False), traj(1.0, False)]),  # no variance: skipped
        TrajectoryGroup(trajectories=[traj(0.0, False), traj(0.5, False), traj(1.0, False)]),  # 0.5 = mean
    ]
    assert rl_untrainable(groups) == [
        "group 0, trajectory 0, message 1: no logprobs and no token ids",
        "group 2, trajectory 0, message 1: no logprobs and no token ids",
        "group 2, trajectory 2, message 1: no logprobs and no token ids",
    ]


def test_exception_record_is_arts_shape() -> None:
    try:
        raise ValueError("rollout crashed")
    except ValueError as exc:
        record = exception_record(exc)
    assert record.type == "<class 'ValueError'>" and record.message == "rollout crashed"
    assert record.traceback.rstrip().endswith("ValueError: rollout crashed")


def test_gather_runs_each_rollout_in_the_callers_context() -> None:
    """A traced parent call (a ContextVar) set around ``gather`` is seen inside the worker threads."""
    from contextvars import ContextVar

    parent: ContextVar[str | None] = ContextVar("parent", default=None)

    def rollout(word: str) -> Trajectory:
        fields = {"messages_and_choices": [{"role": "user", "content": word}]}
        return Trajectory.model_validate({**fields, "metadata": {"parent": parent.get()}})

    token = parent.set("gather-call")
    try:
        groups = gather(["a", "b", "c"], rollout, group_size=2, max_concurrency=4, progress=False)
    finally:
        parent.reset(token)
    assert [t.metadata["parent"] for g in groups for t in g.trajectories] == ["gather-call"] * 6


def test_gather_shows_a_progress_bar_to_the_end(capsys: pytest.CaptureFixture[str]) -> None:
    def rollout(word: str) -> Trajectory:
        if word == "bad":
            raise ValueError(word)
        return Trajectory.model_validate({"messages_and_choices": [], "reward": 1.0})

    groups = gather(["a", "bad"], rollout, group_size=2, desc="words")
    assert [len(g.exceptions) for g in groups] == [0, 2]
    last = capsys.readouterr().err.strip().split("\r")[-1]
    assert last.startswith("words: 100%") and "4/4" in last and "reward=1.000, exceptions=2" in last


def test_gather_captures_exceptions_into_their_group(server: LocalServer) -> None:
    client = server.client()
    calls: list[str] = []

    def rollout(word: str):  # type: ignore[no-untyped-def]
        calls.append(word)
        if word == "bad" and calls.count("bad") == 2:
            raise ValueError("second rollout of bad failed")
        return reverse.rollout(client, "toolkit/tiny-chat-1m")("cat" if word == "bad" else word)

    groups = gather(["dog", "bad"], rollout, group_size=3, max_concurrency=4, progress=False)
    assert [len(g.trajectories) for g in groups] == [3, 2]
    assert [len(g.exceptions) for g in groups] == [0, 1]
    assert groups[1].exceptions[0].type == "<class 'ValueError'>"
    with pytest.raises(RuntimeError, match="1 of 6 rollouts failed"):
        calls.clear()
        gather(["dog", "bad"], rollout, group_size=3, max_exceptions=0, progress=False)


async def test_gather_async_runs_the_async_rollout(server: LocalServer) -> None:
    async with server.async_client() as client:
        groups = await gather_async(
            ["cat", "dog"],
            reverse.async_rollout(client, "toolkit/tiny-chat-1m"),
            group_size=2,
            max_concurrency=2,
            progress=False,
        )
    assert [len(g.trajectories) for g in groups] == [2, 2]
    assert all(isinstance(t.messages_and_choices[-1], Choice) for g in groups for t in g.trajectories)


def test_the_whole_loop_trains_and_serves_the_new_checkpoint(server: LocalServer) -> None:
    """Rollouts from step 0 (every one answered), rewards that differ in each group, an RL job that
    trains on all four groups, and step 1 served with its own weights: a fixed answer's logprob
    changed."""
    client = server.client()
    model = new_model(client, "loop")
    groups = gather(
        reverse.sample_words(4, seed=5),
        reverse.rollout(client, served(model, 0)),
        group_size=4,
        progress=False,
    )
    assert not any(g.exceptions for g in groups) and all(len(g.trajectories) == 4 for g in groups)
    for g in groups:
        for i, t in enumerate(g.trajectories):
            t.reward = float(i % 2)
    job = client.training_jobs.create(
        model_id=model.id, trajectory_groups=groups, experimental_config={"learning_rate": 1e-4}
    )
    checkpoint = job.wait(progress=False)
    assert checkpoint.step == 1 and checkpoint.trained
    assert checkpoint.metrics["data/step_num_groups_trainable"] == 4
    assert checkpoint.metrics["data/step_num_gradient_steps"] >= 1
    before, after = (answer_logprob(client, served(model, s), "cat", "tac") for s in (0, 1))
    assert after != before
    again = gather(["cat"], reverse.rollout(client, served(model, 1)), group_size=2, progress=False)
    assert len(again[0].trajectories) == 2 and not again[0].exceptions


def test_sft_data_from_trajectories_message_lists_and_files(tmp_path: Path) -> None:
    made = Trajectory.model_validate(
        {
            "messages_and_choices": [
                {"role": "user", "content": "reverse cat"},
                {"index": 0, "message": {"role": "assistant", "content": None}, "token_ids": [1]},
            ],
            "tools": [{"type": "function", "function": {"name": "f"}}],
        }
    )
    lines = train_jsonl([made, reverse.conversation("dog"), {"messages": reverse.conversation("cow")}])
    records = [json.loads(line) for line in lines.decode().splitlines()]
    assert records[0] == {
        "messages": [{"role": "user", "content": "reverse cat"}, {"role": "assistant", "content": ""}],
        "tools": [{"type": "function", "function": {"name": "f"}}],
    }
    assert records[1] == {"messages": reverse.conversation("dog")}
    assert records[2] == {"messages": reverse.conversation("cow")}
    path = tmp_path / "train.jsonl"
    path.write_bytes(lines)
    assert train_jsonl(path) == lines == train_jsonl(str(path))
