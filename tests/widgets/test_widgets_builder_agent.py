"""TrajectoryBuilder composes multi-turn agent trajectories: several tool calls in one assistant turn,
tool results that answer the open calls, the trajectory's tools; the result is valid SFT data."""

from __future__ import annotations

import pytest

from toolkit.client.sft_data import train_jsonl
from toolkit.server.training.data import iter_conversations
from toolkit.types.training import Choice
from toolkit.widgets import TrajectoryBuilder


def get(key: str) -> str:
    """Code of a key."""
    return key


def test_tool_calls_results_and_tools_make_a_multi_turn_trajectory() -> None:
    b = TrajectoryBuilder(tools=[get])
    b.add_message("user", "codes of abc and xyz")
    b.add_tool_call("get", '{"key": "abc"}')
    b.tool_name.value, b.tool_args.value = "get", '{"key": "xyz"}'
    b.add_tool_call()  # the form's fields: a second call in the same assistant turn
    assert len(b.draft) == 2 and b.open_calls() == ["call_1", "call_2"]
    b.add_message("tool", "417")  # answers the first open call
    assert b.open_calls() == ["call_2"]
    b.add_message("tool", "093", tool_call_id="call_2")
    assert b.open_calls() == []
    with pytest.raises(
        ValueError, match=r"^a tool message answers a tool call of the last assistant turn; none is open$"
    ):
        b.add_message("tool", "extra")
    b.add_message("assistant", "417 and 093")
    assert b.draft_view.value.count('class="tool-call"') == 2
    assert b.draft_view.value.count('class="tool-result"') == 2
    traj = b.add_trajectory(reward=1.0)
    assert [t.function.name for t in traj.tools or []] == ["get"]
    call_turn = traj.messages_and_choices[1]
    assert isinstance(call_turn, Choice) and call_turn.finish_reason == "tool_calls"
    assert [(c.id, c.function.arguments) for c in call_turn.message.tool_calls or []] == [
        ("call_1", '{"key": "abc"}'),
        ("call_2", '{"key": "xyz"}'),
    ]
    assert [m.tool_call_id for m in traj.messages_and_choices[2:4]] == ["call_1", "call_2"]  # type: ignore[union-attr]
    (conversation,) = iter_conversations("train.jsonl", train_jsonl([traj]))  # the server's SFT checks pass
    assert conversation.tools == [traj.tools[0].model_dump(mode="json", exclude_none=True)]  # type: ignore[index]


def test_wrong_calls_and_results_are_refused() -> None:
    b = TrajectoryBuilder()
    b.add_message("user", "hi")
    with pytest.raises(ValueError, match=r"^the arguments of get are not JSON \(Expecting"):
        b.add_tool_call("get", "{key: abc}")
    with pytest.raises(ValueError, match=r"^name the tool to call$"):
        b.add_tool_call()
    b.add_tool_call("get", "{}")
    with pytest.raises(ValueError, match=r"^no open tool call has the id 'call_9' \(open: call_1\)$"):
        b.add_message("tool", "x", tool_call_id="call_9")
    b.tool_name.value, b.tool_args.value = "get", "[1"
    b.action("add tool call", b.add_tool_call)()  # the button: the problem shows in the status line
    assert b.status_line.kind == "error" and "are not JSON" in b.status_line.text
    assert len(b.draft) == 2
