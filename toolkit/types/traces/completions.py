"""Completions: chat completions run by the trace service and recorded as calls."""

from __future__ import annotations

from typing import Any

from ..common import WireModel


class CompletionsCreateReq(WireModel):
    """``inputs`` is a chat-completion request (``model``, ``messages``, sampling options)."""

    project_id: str
    inputs: dict[str, Any]
    track_llm_call: bool = True
    trace_id: str | None = None
    parent_id: str | None = None
    wb_user_id: str | None = None


class CompletionsCreateRes(WireModel):
    response: dict[str, Any]
    weave_call_id: str | None = None
    trace_id: str | None = None
