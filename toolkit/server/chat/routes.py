"""``POST /v1/chat/completions`` (JSON, or Server-Sent Events when ``stream``) and ``GET /v1/usage``.

Extension: ``GET /v1/usage[?project=team/project]`` lists the caller's chat usage per team/project
(the ``OpenAI-Project`` header of each request, default ``<user>/inference``) and model.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Body, Depends, Request
from fastapi.responses import JSONResponse, StreamingResponse

from ...types.chat import ChatCompletionChunk, ProjectUsage, UsageReport
from ..auth import current_user
from ..errors import ApiError
from ..store.users import User
from .checks import parse_request
from .context import ChatContext, chat_context
from .deadline import within_limits
from .errors import EngineError, EngineRejected, InvalidRequest
from .responses import create_chat_completion
from .streaming import stream_chat_completion

router = APIRouter()
DONE = "data: [DONE]\n\n"


def _error_event(exc: ApiError) -> str:
    body = {
        "error": {"message": str(exc.detail), "type": exc.error_type, "param": exc.param, "code": exc.status}
    }
    return f"data: {json.dumps(body, separators=(',', ':'), ensure_ascii=False)}\n\n"


async def sse_events(
    first: ChatCompletionChunk | None, rest: AsyncIterator[ChatCompletionChunk]
) -> AsyncIterator[str]:
    """Chunks as events, then ``[DONE]``; a failure after the start is an error event, then ``[DONE]``."""
    try:
        if first is not None:
            yield f"data: {first.wire_json()}\n\n"
        async for chunk in rest:
            yield f"data: {chunk.wire_json()}\n\n"
    except ApiError as exc:
        yield _error_event(exc)
    except Exception:
        yield _error_event(EngineError("Internal server error"))
    finally:
        await rest.aclose()  # type: ignore[attr-defined]
    yield DONE


async def _rejected(exc: ApiError) -> AsyncIterator[str]:
    yield _error_event(exc)
    yield DONE


# a completion as JSON, or with ``stream`` its chunks as Server-Sent Events
EVENTS: dict[str, Any] = {"text/event-stream": {"schema": {}}}
ANSWERS: dict[int | str, dict[str, Any]] = {200: {"content": {"application/json": {"schema": {}}, **EVENTS}}}


@router.post("/v1/chat/completions", response_model=None, responses=ANSWERS)
@router.post("/v1/chat/completions/", response_model=None, include_in_schema=False)
async def chat_completions(
    request: Request,
    body: Any = Body(...),
    chat: ChatContext = Depends(chat_context),
    user: User = Depends(current_user),
) -> JSONResponse | StreamingResponse:
    """Create a chat completion (vLLM's request and response format)."""
    content_type = request.headers.get("content-type", "")
    if content_type.split(";")[0].strip().lower() != "application/json":
        raise InvalidRequest(
            "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed"
        )
    project = request.headers.get("openai-project")
    header_id = request.headers.get("x-request-id")
    if isinstance(body, dict) and header_id:
        body = {**body, "request_id": header_id}
    if not parse_request(body).stream:
        work = create_chat_completion(chat, user, body, project)
        completion = await within_limits(request, chat.request_timeout or None, work)
        return JSONResponse(completion.model_dump(mode="json"))
    chunks = stream_chat_completion(chat, user, body, project)
    try:
        first = await anext(chunks)
    except EngineRejected as exc:
        return StreamingResponse(_rejected(exc), media_type="text/event-stream")
    except StopAsyncIteration:
        first = None
    return StreamingResponse(sse_events(first, chunks), media_type="text/event-stream")


@router.get("/v1/usage", response_model=UsageReport)
def usage(
    project: str | None = None,
    chat: ChatContext = Depends(chat_context),
    user: User = Depends(current_user),
) -> UsageReport:
    """The caller's chat usage per team/project and model (extension endpoint)."""
    rows = chat.usage.rows(user, project)
    return UsageReport(
        data=[
            ProjectUsage(
                project=r.project,
                model=r.model,
                requests=r.requests,
                prompt_tokens=r.prompt_tokens,
                completion_tokens=r.completion_tokens,
                total_tokens=r.total_tokens,
                cached_tokens=r.cached_tokens,
            )
            for r in rows
        ]
    )
