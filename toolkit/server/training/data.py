"""Parsing of SFT training data: ART's ``train.jsonl`` or ``trajectories.jsonl`` + ``metadata.json``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ...types.training import Trajectory

DATA_FILES = ("train.jsonl", "trajectories.jsonl")
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
        tools = record.get("tools")
    else:
        try:
            trajectory = Trajectory.model_validate(record)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            raise TrainingDataError(filename, line, f"{loc}: {first['msg']}") from None
        messages = _trajectory_messages(trajectory)
        tools = [t.model_dump(exclude_none=True) for t in trajectory.tools] if trajectory.tools else None
    if messages[-1].get("role") != "assistant":
        raise TrainingDataError(filename, line, "the last message must be an assistant message")
    return Conversation(messages=messages, tools=tools)


def _trajectory_messages(trajectory: Trajectory) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for item in trajectory.messages_and_choices:
        if hasattr(item, "message"):
            msg = item.message.model_dump(exclude_none=True)
            msg["content"] = msg.get("content") or ""
            out.append({"role": "assistant", **{k: v for k, v in msg.items() if k != "role"}})
        else:
            out.append(item.model_dump(exclude_none=True))
    if not out:
        raise ValueError("empty trajectory")
    return out


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
