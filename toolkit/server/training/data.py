"""Parsing of SFT training data: ART's ``train.jsonl`` or ``trajectories.jsonl`` + ``metadata.json``.

A ``train.jsonl`` line is ``{"messages": [...], "tools"?: [...]}`` as ART, OpenAI fine-tuning and TRL
write it: assistant messages may carry ``tool_calls`` (``arguments`` a JSON string, or an object as
TRL writes it), ``tool`` messages answer them (by ``tool_call_id``, else by ``name``, else in call
order), and ``tools`` is a list of function tools (or a JSON string of one, as TRL allows). Every
line is checked the same way at upload and when a job reads it; the first problem is reported with
its line number.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ...types.training import Trajectory

DATA_FILES = ("train.jsonl", "trajectories.jsonl")
ROLES = ("system", "developer", "user", "assistant", "tool")
ALLOWED_FILES = (*DATA_FILES, "metadata.json")


class TrainingDataError(ValueError):
    """A malformed file, with the 1-based line where it went wrong."""

    def __init__(self, filename: str, line: int | None, message: str) -> None:
        where = f"{filename}, line {line}" if line is not None else filename
        super().__init__(f"{where}: {message}")
        self.filename = filename
        self.line = line
        self.message = message


@dataclass
class Conversation:
    """One training example: chat messages (the assistant turns carry the loss) and tools."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None


def _conversation(filename: str, line: int, record: Any) -> Conversation:
    if not isinstance(record, dict):
        raise TrainingDataError(filename, line, "each line must be a JSON object")
    if filename == "train.jsonl":
        messages = record.get("messages")
        if not isinstance(messages, list) or not messages:
            raise TrainingDataError(filename, line, "'messages' must be a non-empty list")
        if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
            raise TrainingDataError(filename, line, "every message needs a string 'role'")
        tools = _tools(record.get("tools"))
    else:
        try:
            trajectory = Trajectory.model_validate(record)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            raise TrainingDataError(filename, line, f"{loc}: {first['msg']}") from None
        messages = trajectory.messages()
        if not messages:
            raise TrainingDataError(filename, line, "empty trajectory")
        tools = [t.model_dump(exclude_none=True) for t in trajectory.tools] if trajectory.tools else None
    check_messages(messages, tools)
    if messages[-1].get("role") != "assistant":
        raise TrainingDataError(filename, line, "the last message must be an assistant message")
    return Conversation(messages=messages, tools=tools)


def _tools(value: Any) -> list[dict[str, Any]] | None:
    """The ``tools`` of a line: a list of function tools, or a JSON string of one (TRL)."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"'tools' is a string that is not JSON ({exc.msg})") from None
    if not isinstance(value, list):
        raise ValueError("'tools' must be a list of function tools")
    for i, tool in enumerate(value):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ValueError(f"tools[{i}] must be a function tool with a string function.name")
    return value or None


def _arguments(where: str, arguments: Any) -> None:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: the arguments are not JSON ({exc.msg})") from None
    if not isinstance(arguments, dict):
        raise ValueError(f"{where}: the arguments must be a JSON object (or a string of one)")


def check_messages(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> None:
    """Roles, tool calls and tool results of one conversation; a ValueError names the first problem.
    A call must name one of ``tools`` (a line without ``tools`` may call none), so that the model is
    never trained to call a tool its prompt does not offer."""
    known = {t["function"]["name"] for t in tools or ()}
    open_calls: list[tuple[str | None, str]] = []  # (id, name) of calls not answered yet
    for i, message in enumerate(messages):
        role = message["role"]
        if role not in ROLES:
            raise ValueError(f"message {i}: unknown role {role!r} (use one of {', '.join(ROLES)})")
        if role == "tool":
            _answer(i, message, open_calls)
            continue
        open_calls = []
        calls = message.get("tool_calls") if role == "assistant" else None
        if calls is None:
            continue
        if not isinstance(calls, list):
            raise ValueError(f"message {i}: 'tool_calls' must be a list")
        for j, call in enumerate(calls):
            where = f"message {i}, tool call {j}"
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                raise ValueError(f"{where}: needs 'function' with a string 'name'")
            name = function["name"]
            if name not in known:
                among = "which is not among the line's tools" if known else "but the line has no 'tools'"
                raise ValueError(f"{where}: calls {name!r}, {among}")
            _arguments(where, function.get("arguments", {}))
            call_id = call.get("id")
            if call_id is not None and any(call_id == other for other, _ in open_calls):
                raise ValueError(f"{where}: the id {call_id!r} is used twice")
            open_calls.append((call_id, name))


def _answer(i: int, message: dict[str, Any], open_calls: list[tuple[str | None, str]]) -> None:
    """Match a tool message to the call it answers (by id, else by name, else the first open one)."""
    call_id, name = message.get("tool_call_id"), message.get("name")
    for k, (open_id, open_name) in enumerate(open_calls):
        if (call_id is not None and open_id == call_id) or (
            call_id is None and (name is None or name == open_name)
        ):
            del open_calls[k]
            return
    wanted = f" for call {call_id!r}" if call_id is not None else f" for {name!r}" if name else ""
    raise ValueError(f"message {i}: a tool message{wanted} without a matching tool call before it")


def iter_conversations(filename: str, data: bytes) -> Iterator[Conversation]:
    """Each conversation of a data file; raises :class:`TrainingDataError` at the first bad line."""
    if filename not in DATA_FILES:
        raise TrainingDataError(filename, None, f"expected one of {', '.join(DATA_FILES)}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TrainingDataError(filename, None, f"not UTF-8 ({exc.reason})") from None
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise TrainingDataError(filename, number, f"invalid JSON ({exc.msg})") from None
        try:
            yield _conversation(filename, number, record)
        except ValueError as exc:
            if isinstance(exc, TrainingDataError):
                raise
            raise TrainingDataError(filename, number, str(exc)) from None


def check_metadata(data: bytes) -> dict[str, Any]:
    try:
        meta = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TrainingDataError("metadata.json", None, f"invalid JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise TrainingDataError("metadata.json", None, "must be a JSON object")
    return meta
