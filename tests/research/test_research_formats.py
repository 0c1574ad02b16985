"""Export → import round trips of every format: what a format carries comes back equal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolkit.research import export, imports
from toolkit.types.training import (
    ChatMessage,
    Choice,
    ChoiceMessage,
    PydanticException,
    Tool,
    Trajectory,
    TrajectoryGroup,
)

TOOL = Tool.model_validate(
    {
        "type": "function",
        "function": {
            "name": "get",
            "description": "Code of a key.",
            "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
        },
    }
)
CALL = {"id": "call_0", "type": "function", "function": {"name": "get", "arguments": '{"key":"kfz"}'}}
LOGPROBS = {"content": [{"token": "a", "logprob": -0.5, "top_logprobs": []}]}


def agent_trajectory(code: str, reward: float) -> Trajectory:
    """Multi-turn: a system prompt, a call (content null), the tool's reply, an answer; one plain
    assistant message given as context (not trainable)."""
    return Trajectory(
        messages_and_choices=[
            ChatMessage(role="system", content="Answer with the code."),
            ChatMessage(role="user", content="code abc"),
            ChatMessage(role="assistant", content="(an earlier answer)"),
            ChatMessage(role="user", content="code kfz"),
            Choice.model_validate(
                {
                    "finish_reason": "tool_calls",
                    "message": {"role": "assistant", "content": None, "tool_calls": [CALL]},
                    "logprobs": LOGPROBS,
                    "token_ids": [1, 2],
                }
            ),
            ChatMessage(role="tool", content=code, tool_call_id="call_0"),
            Choice.model_validate(
                {
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": code},
                    "logprobs": LOGPROBS,
                }
            ),
        ],
        tools=[TOOL],
        reward=reward,
        metrics={"called": True, "turns": 2},
        metadata={"key": "kfz", "seed": 3},
        logs=["episode done"],
    )


@pytest.fixture
def groups() -> list[TrajectoryGroup]:
    one_turn = Trajectory(
        messages_and_choices=[
            ChatMessage(role="user", content="reverse cat"),
            Choice(message=ChoiceMessage(content="tac"), finish_reason="stop"),
        ],
        reward=1.0,
    )
    return [
        TrajectoryGroup(
            trajectories=[agent_trajectory("123", 1.0), agent_trajectory("999", 0.0)],
            exceptions=[PydanticException(type="<class 'ValueError'>", message="boom")],
            metadata={"scenario": "kfz"},
        ),
        TrajectoryGroup(trajectories=[one_turn]),
    ]


def messages_only(choice_for_plain_assistant: bool):
    """What openai/trl carry of a trajectory: messages (choices as content + tool calls) and tools."""

    def carried(t: Trajectory) -> Trajectory:
        items = []
        for m in t.messages_and_choices:
            if isinstance(m, Choice):
                items.append(
                    Choice(message=ChoiceMessage(content=m.message.content, tool_calls=m.message.tool_calls))
                )
            elif m.role == "assistant" and choice_for_plain_assistant:
                items.append(Choice(message=ChoiceMessage(content=m.content)))
            else:
                items.append(m)
        return Trajectory(messages_and_choices=items, tools=t.tools)

    return carried


def per_trajectory(groups: list[TrajectoryGroup], carried) -> list[TrajectoryGroup]:
    return [TrajectoryGroup(trajectories=[carried(t)]) for g in groups for t in g.trajectories]


def art_rows_carried(groups: list[TrajectoryGroup]) -> list[TrajectoryGroup]:
    plain = messages_only(False)
    return [
        TrajectoryGroup(
            trajectories=[
                plain(t).model_copy(
                    update={"reward": t.reward, "metrics": t.metrics, "metadata": t.metadata, "logs": t.logs}
                )
                for t in g.trajectories
            ]
        )
        for g in groups
    ]


def test_openai_jsonl_round_trip(groups: list[TrajectoryGroup], tmp_path: Path) -> None:
    path = export.to_jsonl(groups, tmp_path / "sft.jsonl", format="openai")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    first = lines[0]
    assert first["parallel_tool_calls"] is True and first["tools"][0]["function"]["name"] == "get"
    assert [m.get("weight") for m in first["messages"]] == [None, None, 0, None, 1, None, 1]
    assert first["messages"][4] == {"role": "assistant", "content": None, "tool_calls": [CALL], "weight": 1}
    assert first["messages"][5] == {"role": "tool", "content": "123", "tool_call_id": "call_0"}
    assert imports.read_jsonl(path, format="openai") == per_trajectory(groups, messages_only(False))


def test_trl_jsonl_round_trip(groups: list[TrajectoryGroup], tmp_path: Path) -> None:
    path = export.to_jsonl(groups, tmp_path / "trl.jsonl", format="trl")
    first = json.loads(path.read_text().splitlines()[0])
    assert set(first) == {"messages", "tools"} and isinstance(first["tools"], str)
    assert json.loads(first["tools"]) == [TOOL.model_dump(mode="json", exclude_none=True)]
    assert imports.read_jsonl(path, format="trl") == per_trajectory(groups, messages_only(True))


def test_art_jsonl_round_trip_strips_logprobs_only(groups: list[TrajectoryGroup], tmp_path: Path) -> None:
    path = export.to_jsonl(groups, tmp_path / "groups.jsonl")
    assert '"logprob"' not in path.read_text()
    back = imports.read_jsonl(path)
    for g in groups:
        for t in g.trajectories:
            for c in t.choices():
                c.logprobs = None
    assert back == groups
    assert back[0].trajectories[0].choices()[0].token_ids == [1, 2]


def test_art_jsonl_keeping_logprobs_is_lossless(groups: list[TrajectoryGroup], tmp_path: Path) -> None:
    path = export.to_jsonl(groups, tmp_path / "groups.jsonl", keep_logprobs=True)
    assert '"logprob"' in path.read_text()
    assert imports.read_jsonl(path) == groups
    with pytest.raises(ValueError, match="keep_logprobs needs format 'art'"):
        export.to_jsonl(groups, tmp_path / "sft.jsonl", format="openai", keep_logprobs=True)
    assert not (tmp_path / "sft.jsonl").exists()


def test_parquet_round_trip_in_art_layout(groups: list[TrajectoryGroup], tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    path = export.to_parquet(groups, tmp_path / "groups.parquet")
    table = pq.read_table(path)
    assert table.column_names == ["group_index", "reward", "metrics", "metadata", "tools", "logs", "messages"]
    message = table.column("messages")[0][4].as_py()
    assert message["trainable"] is True and json.loads(message["tool_calls"]) == [CALL]
    assert imports.read_parquet(path) == art_rows_carried(groups)


def test_dataset_round_trip_in_each_format(groups: list[TrajectoryGroup]) -> None:
    trl = export.to_dataset(groups, "trl")
    assert trl.column_names == ["messages", "tools"] and len(trl) == 3
    assert imports.from_dataset(trl, "trl") == per_trajectory(groups, messages_only(True))
    openai = export.to_dataset(groups, "openai")
    assert imports.from_dataset(openai, "openai") == per_trajectory(groups, messages_only(False))
    assert imports.from_dataset(export.to_dataset(groups, "art"), "art") == art_rows_carried(groups)


def test_frame_round_trip(groups: list[TrajectoryGroup]) -> None:
    frame = export.to_frame(groups)
    assert list(frame["reward"]) == [1.0, 0.0, 1.0]
    assert list(frame["last_content"]) == ["123", "999", "tac"]
    assert list(frame["metric/called"])[:2] == [True, True] and frame["meta/key"][0] == "kfz"
    bare = [TrajectoryGroup(trajectories=g.trajectories) for g in groups]
    assert imports.from_frame(frame) == bare


def test_stored_records_fold_into_groups(groups: list[TrajectoryGroup]) -> None:
    records = [
        {
            "id": i,
            "group_id": gid,
            "split": "train",
            "step": 0,
            "reward": t.reward,
            "trajectory": t.model_dump(mode="json"),
        }
        for i, (gid, t) in enumerate((gid, t) for gid, g in enumerate(groups) for t in g.trajectories)
    ]
    back = imports.from_frame(export.to_frame(records))
    assert back == [TrajectoryGroup(trajectories=g.trajectories) for g in groups]


def test_unknown_format_and_content_parts_are_errors(groups: list[TrajectoryGroup], tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown format 'sharegpt'"):
        export.to_jsonl(groups, tmp_path / "x.jsonl", format="sharegpt")  # type: ignore[arg-type]
    assert not (tmp_path / "x.jsonl").exists()
    parts = Trajectory(
        messages_and_choices=[ChatMessage(role="user", content=[{"type": "text", "text": "hi"}])]
    )
    with pytest.raises(ValueError, match="only text content"):
        export.to_rows([TrajectoryGroup(trajectories=[parts])], "openai")
