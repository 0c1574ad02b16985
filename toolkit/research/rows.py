"""One trajectory as a row of each export format, and back.

- ``openai``: OpenAI fine-tuning JSONL, ``{"messages", "tools"?, "parallel_tool_calls"}``; every
  assistant message has ``weight`` 1 (a trainable choice) or 0 (an assistant message given as
  context). Drops reward, metrics, metadata, logs, finish reasons, token ids and logprobs.
- ``trl``: TRL's conversational language-modelling row, ``{"messages", "tools"?}`` with ``tools`` a
  JSON string (a column of JSON strings loads in every ``datasets`` version). TRL trains every
  assistant message, so every assistant message comes back as a choice; drops the same as ``openai``.
- ``art``: ART's Parquet row, ``{group_index, reward, metrics, metadata, tools, logs, messages}``
  with ``messages[{role, content, tool_calls, tool_call_id, trainable}]``; ``metrics``, ``metadata``,
  ``tools`` and each message's ``tool_calls`` are JSON strings (their keys vary row to row). Drops
  finish reasons, token ids, logprobs, message names, additional histories, policy versions and the
  group's own fields (exceptions, metadata, metrics, logs).

Tool-call ``arguments`` stay the JSON strings the model wrote (never re-encoded), and a choice's
``content`` stays null when it was null. Only text content is carried: list content is a ValueError.
"""

from __future__ import annotations

import json
from typing import Any

from ..types.training import ChatMessage, Choice, ChoiceMessage, Tool, ToolCall, Trajectory

FORMATS = ("openai", "trl", "art")


def check_format(format: str) -> None:
    if format not in FORMATS:
        raise ValueError(f"unknown format {format!r}: one of {', '.join(FORMATS)}")


def _text(item: ChatMessage | Choice) -> str | None:
    content = item.message.content if isinstance(item, Choice) else item.content
    if content is not None and not isinstance(content, str):
        raise ValueError("only text content can be exported (this message has content parts)")
    return content


def _calls(calls: list[ToolCall] | None) -> list[dict[str, Any]] | None:
    return [c.model_dump(mode="json", exclude_none=True) for c in calls] if calls else None


def message(item: ChatMessage | Choice, weights: bool) -> dict[str, Any]:
    """A chat message in OpenAI's form; assistant messages get ``weight`` when ``weights``."""
    if isinstance(item, Choice):
        out: dict[str, Any] = {"role": "assistant", "content": _text(item)}
        if item.message.tool_calls:
            out["tool_calls"] = _calls(item.message.tool_calls)
    else:
        _text(item)
        out = item.model_dump(mode="json", exclude_none=True)
        out.setdefault("content", None)
    if weights and out["role"] == "assistant":
        out["weight"] = 1 if isinstance(item, Choice) else 0
    return out


def item(data: dict[str, Any], trainable: bool) -> ChatMessage | Choice:
    """A message back as a choice (trainable assistant turn) or a plain message."""
    fields = {k: v for k, v in data.items() if k not in ("weight", "trainable")}
    if data.get("role") == "assistant" and trainable:
        return Choice(
            message=ChoiceMessage(content=fields.get("content"), tool_calls=fields.get("tool_calls"))
        )
    return ChatMessage.model_validate({k: v for k, v in fields.items() if v is not None or k == "content"})


def _tools(trajectory: Trajectory) -> list[dict[str, Any]] | None:
    return (
        [t.model_dump(mode="json", exclude_none=True) for t in trajectory.tools] if trajectory.tools else None
    )


def _parse_tools(value: Any) -> list[Tool] | None:
    if value is None or value == "":
        return None
    tools = json.loads(value) if isinstance(value, str) else value
    return [Tool.model_validate(t) for t in tools] if tools else None


def openai_row(trajectory: Trajectory, weights: bool = True) -> dict[str, Any]:
    row: dict[str, Any] = {"messages": [message(m, weights) for m in trajectory.messages_and_choices]}
    tools = _tools(trajectory)
    if tools:
        row["tools"] = tools
        row["parallel_tool_calls"] = True
    return row


def from_openai_row(row: dict[str, Any]) -> Trajectory:
    return Trajectory(
        messages_and_choices=[item(m, m.get("weight") != 0) for m in row["messages"]],
        tools=_parse_tools(row.get("tools")),
    )


def trl_row(trajectory: Trajectory) -> dict[str, Any]:
    row: dict[str, Any] = {"messages": [message(m, False) for m in trajectory.messages_and_choices]}
    tools = _tools(trajectory)
    if tools:
        row["tools"] = json.dumps(tools)
    return row


def from_trl_row(row: dict[str, Any]) -> Trajectory:
    return Trajectory(
        messages_and_choices=[item(m, True) for m in row["messages"]],
        tools=_parse_tools(row.get("tools")),
    )


def art_row(trajectory: Trajectory, group_index: int) -> dict[str, Any]:
    messages = []
    for m in trajectory.messages_and_choices:
        data = message(m, False)
        calls = data.get("tool_calls")
        messages.append(
            {
                "role": data["role"],
                "content": data["content"],
                "tool_calls": json.dumps(calls) if calls else None,
                "tool_call_id": data.get("tool_call_id"),
                "trainable": isinstance(m, Choice),
            }
        )
    tools = _tools(trajectory)
    return {
        "group_index": group_index,
        "reward": trajectory.reward,
        "metrics": json.dumps(trajectory.metrics),
        "metadata": json.dumps(trajectory.metadata),
        "tools": json.dumps(tools) if tools else None,
        "logs": list(trajectory.logs),
        "messages": messages,
    }


def from_art_row(row: dict[str, Any]) -> Trajectory:
    items = []
    for m in row["messages"]:
        data = {k: v for k, v in m.items() if k != "tool_calls"}
        if m.get("tool_calls"):
            data["tool_calls"] = json.loads(m["tool_calls"])
        items.append(item(data, bool(m.get("trainable"))))
    return Trajectory(
        messages_and_choices=items,
        reward=row["reward"],
        tools=_parse_tools(row.get("tools")),
        metrics=json.loads(row["metrics"] or "{}"),
        metadata=json.loads(row["metadata"] or "{}"),
        logs=list(row.get("logs") or []),
    )
