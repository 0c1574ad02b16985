"""``/completions/create`` and ``/completions/create_stream``: a chat completion from the local engine,
recorded as a ``weave.completions_create`` call with its usage (errors are answered in-band, as
Weave does)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import orjson
from starlette.concurrency import run_in_threadpool

from ...types.traces import CompletedCall, CompletionsCreateReq, EndedCall, StartedCall
from ..chat.context import ChatContext
from ..chat.responses import create_chat_completion
from ..chat.streaming import stream_chat_completion
from ..errors import ApiError
from ..store.users import User
from .common import uuid7
from .service import TraceService

OP_NAME = "weave.completions_create"
WEAVE_ONLY = ("prompt", "template_vars", "vertex_credentials", "extra_headers", "api_version", "timeout")
_VAR = re.compile(r"\{(\w+)\}")


def _now() -> datetime:
    return datetime.now(UTC)


def _engine_body(inputs: dict[str, Any]) -> dict[str, Any]:
    """The chat request: Weave-only keys dropped, ``{var}`` in message texts filled from ``template_vars``."""
    body = {k: v for k, v in inputs.items() if k not in WEAVE_ONLY and v is not None}
    variables = inputs.get("template_vars") or {}
    if variables and isinstance(body.get("messages"), list):
        body["messages"] = [
            {**m, "content": _VAR.sub(lambda x: str(variables.get(x[1], x[0])), m["content"])}
            if isinstance(m, dict) and isinstance(m.get("content"), str)
            else m
            for m in body["messages"]
        ]
    return body


def _summary(model: str, usage: dict[str, Any] | None) -> dict[str, Any]:
    if not usage:
        return {}
    keep = ("prompt_tokens", "completion_tokens", "total_tokens")
    return {"usage": {model: {"requests": 1, **{k: usage[k] for k in keep if usage.get(k) is not None}}}}


def _message(exc: ApiError) -> str:
    return exc.detail if isinstance(exc.detail, str) else str(exc.detail)


def _inputs(req: CompletionsCreateReq) -> dict[str, Any]:
    return {k: v for k, v in req.inputs.items() if v is not None and k != "vertex_credentials"}


async def create(
    traces: TraceService, chat: ChatContext, user: User, req: CompletionsCreateReq
) -> dict[str, Any]:
    started = _now()
    error: str | None = None
    try:
        completion = await create_chat_completion(chat, user, _engine_body(req.inputs), req.project_id)
        response: dict[str, Any] = completion.model_dump(mode="json", exclude_none=True)
    except ApiError as exc:
        error = _message(exc)
        response = {"error": error}
    if not req.track_llm_call:
        return {"response": response}
    call_id, trace_id = uuid7(), req.trace_id or uuid7()
    model = str(response.get("model") or req.inputs.get("model") or "unknown")
    call = CompletedCall(
        project_id=req.project_id,
        id=call_id,
        trace_id=trace_id,
        parent_id=req.parent_id,
        op_name=OP_NAME,
        started_at=started,
        ended_at=_now(),
        inputs=_inputs(req),
        output=response,
        summary=_summary(model, response.get("usage")),
        exception=error,
    )
    await run_in_threadpool(traces.calls.complete, user.id, [call])
    return {"response": response, "weave_call_id": call_id, "trace_id": trace_id}


class _Aggregate:
    """The chat completion a stream adds up to (text, tool calls, finish reason per choice), for the
    call's output."""

    def __init__(self) -> None:
        self.head: dict[str, Any] = {}
        self.choices: dict[int, dict[str, Any]] = {}
        self.usage: dict[str, Any] | None = None

    def add(self, chunk: dict[str, Any]) -> None:
        for key in ("id", "created", "model", "system_fingerprint"):
            if chunk.get(key) is not None:
                self.head[key] = chunk[key]
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            index = choice.get("index", 0)
            slot = self.choices.setdefault(
                index,
                {"index": index, "message": {"role": "assistant", "content": ""}, "finish_reason": None},
            )
            delta = choice.get("delta") or {}
            slot["message"]["content"] += delta.get("content") or ""
            for piece in delta.get("tool_calls") or []:
                _add_tool_call(slot["message"].setdefault("tool_calls", []), piece)
            if delta.get("role"):
                slot["message"]["role"] = delta["role"]
            if choice.get("finish_reason"):
                slot["finish_reason"] = choice["finish_reason"]

    def result(self) -> dict[str, Any]:
        for choice in self.choices.values():
            message = choice["message"]
            if message.get("tool_calls") and not message["content"]:
                message["content"] = None  # as in the whole response: no text besides the calls
        out = {
            **self.head,
            "object": "chat.completion",
            "choices": [self.choices[i] for i in sorted(self.choices)],
        }
        if self.usage:
            out["usage"] = self.usage
        return out


def _add_tool_call(calls: list[dict[str, Any]], piece: dict[str, Any]) -> None:
    """Add a streamed tool-call delta to the calls it belongs to (by ``index``): the first delta of
    a call brings ``id``, ``type`` and the name, later ones ``arguments`` fragments to append."""
    index = piece.get("index", 0)
    while len(calls) <= index:
        calls.append({"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
    call, function = calls[index], piece.get("function") or {}
    if piece.get("id"):
        call["id"] = piece["id"]
    call["function"]["name"] += function.get("name") or ""
    call["function"]["arguments"] += function.get("arguments") or ""


async def stream(
    traces: TraceService, chat: ChatContext, user: User, req: CompletionsCreateReq
) -> AsyncIterator[bytes]:
    """JSON Lines: ``{"_meta": {...}}`` (when tracked), the engine's chunks, or ``{"error": ...}``."""
    body = _engine_body(req.inputs)
    body["stream"] = True
    body.setdefault("stream_options", {"include_usage": True})
    call_id, trace_id = uuid7(), req.trace_id or uuid7()
    if req.track_llm_call:
        start = StartedCall(
            project_id=req.project_id,
            id=call_id,
            trace_id=trace_id,
            parent_id=req.parent_id,
            op_name=OP_NAME,
            started_at=_now(),
            inputs=_inputs(req),
        )
        await run_in_threadpool(traces.calls.start, user.id, start)
        yield orjson.dumps({"_meta": {"weave_call_id": call_id, "trace_id": trace_id}}) + b"\n"
    total = _Aggregate()
    error: str | None = None
    try:
        async for chunk in stream_chat_completion(chat, user, body, req.project_id):
            data = chunk.model_dump(mode="json", exclude_none=True)
            total.add(data)
            yield orjson.dumps(data) + b"\n"
    except ApiError as exc:
        error = _message(exc)
        yield orjson.dumps({"error": error}) + b"\n"
    if req.track_llm_call:
        output = total.result()
        model = str(output.get("model") or req.inputs.get("model") or "unknown")
        end = EndedCall(
            project_id=req.project_id,
            id=call_id,
            ended_at=_now(),
            output=output,
            summary=_summary(model, total.usage),
            exception=error,
        )
        await run_in_threadpool(traces.calls.end, user.id, end)
