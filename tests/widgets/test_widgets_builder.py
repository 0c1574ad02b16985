"""TrajectoryBuilder logic without a browser: compose, group, edit, remove, JSONL, /log, hand-off."""

from __future__ import annotations

import pytest

from support.widget_support import click, new_model
from toolkit.types.training import Choice
from toolkit.widgets import JobLauncher, TrajectoryBuilder


def compose(builder: TrajectoryBuilder, answer: str, reward: float, group: int) -> None:
    builder.add_message("user", "What is 2+2?")
    builder.add_message("assistant", answer)
    builder.add_trajectory(reward=reward, metrics={"correct": float(reward > 0)}, group=group)


def test_compose_messages_tool_calls_and_groups() -> None:
    b = TrajectoryBuilder()
    b.role.value, b.content.value = "system", "be brief"
    b.add_message()
    b.role.value, b.tool_name.value, b.tool_args.value = "assistant", "calc", '{"x": 2}'
    b.add_message()
    b.add_message("tool", "4", tool_call_id="call_1")
    b.add_message("assistant", "4")
    assert "system: be brief" in b.draft_view.value
    b.reward.value = 1.0
    traj = b.add_trajectory()
    assert b.draft == [] and len(b.groups) == 1 and b.num_trajectories == 1
    # typed by hand: no logprobs or token ids, which the status line says before any RL job
    assert b.status_line.kind == "warning"
    assert b.status_line.text.startswith(
        "trajectory 0.0 has no logprobs or token ids (message 1: no logprobs"
    )
    assert "allow_training_without_logprobs" in b.status_line.text
    first_choice = traj.messages_and_choices[1]
    assert isinstance(first_choice, Choice) and first_choice.finish_reason == "tool_calls"
    assert first_choice.message.tool_calls and first_choice.message.tool_calls[0].function.name == "calc"
    assert traj.messages_and_choices[2].tool_call_id == "call_1"  # type: ignore[union-attr]
    assert traj.reward == 1.0 and len(traj.choices()) == 2
    compose(b, "5", 0.0, group=0)
    compose(b, "4", 1.0, group=5)  # past the end: a new group
    assert [len(g.trajectories) for g in b.groups] == [2, 1] and b.num_trajectories == 3
    assert b.group.max == 2 and "answer" not in b.table.value and "<table" in b.table.value


def test_edit_and_remove() -> None:
    b = TrajectoryBuilder()
    compose(b, "4", 1.0, group=0)
    compose(b, "5", 0.0, group=0)
    b.edit("0.1")
    assert len(b.groups[0].trajectories) == 1 and b.reward.value == 0.0
    assert b.draft[-1]["message"]["content"] == "5"
    b.add_message("user", "try again")
    b.add_message("assistant", "4")
    b.add_trajectory(reward=1.0)
    assert [t.reward for t in b.groups[0].trajectories] == [1.0, 1.0]
    b.selected.value = "0.0"
    b.remove()
    b.remove("0.0")
    assert b.groups == []


def test_jsonl_round_trip() -> None:
    b = TrajectoryBuilder()
    compose(b, "4", 1.0, group=0)
    compose(b, "5", 0.0, group=1)
    text = b.to_jsonl()
    assert len(text.splitlines()) == 2
    other = TrajectoryBuilder()
    assert other.import_jsonl(text) == 2
    assert [g.model_dump() for g in other.groups] == [g.model_dump() for g in b.groups]
    with pytest.raises(ValueError):
        other.import_jsonl("{not json")


def test_log_and_hand_off_to_launcher(server) -> None:
    client = server.client()
    model = new_model(client)
    b = TrajectoryBuilder(client)
    compose(b, "4", 1.0, group=0)
    compose(b, "5", 0.0, group=0)
    result = b.log_groups(model.id, split="val")
    assert result.num_trajectories == 2 and result.metrics["val/reward"] == 0.5
    assert b.status_line.kind == "ok" and b.status_line.text.startswith("logged 2 trajectories")
    b.log_model.value, b.split.value = "no-such-model", "val"
    click(b, "Log to model")
    assert b.status_line.kind == "error" and b.status_line.text.startswith("log failed: 404: ")
    launcher = b.launcher(model_id=model.id)
    assert isinstance(launcher, JobLauncher) and launcher.groups == b.groups
    assert launcher.model.value == model.id
    b.log_model.value = model.id
    click(b, "Train on these groups…")
    (shown,) = b.launch_area.children
    assert isinstance(shown, JobLauncher) and shown.model.value == model.id
    # the hand-made choices carry no logprobs: the launcher says so until the flag is set
    (problem,) = shown.validate()
    assert "allow_training_without_logprobs" in problem
    shown.experimental["allow_training_without_logprobs"].value = "true"
    assert shown.validate() == []
