"""Completion routes: chat completions run on the local engine and recorded as calls."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import Response, StreamingResponse

from ....types import traces as t
from ...chat.context import ChatContext, chat_context
from .. import completions
from ..store import check_project_id
from .wire import JSONL, Store, User_, json_body, ok

router = APIRouter()


@router.post("/completions/create", response_model=t.CompletionsCreateRes)
async def completions_create(
    user: User_,
    traces: Store,
    chat: ChatContext = Depends(chat_context),
    req: t.CompletionsCreateReq = Depends(json_body(t.CompletionsCreateReq)),
) -> Response:
    return ok(await completions.create(traces, chat, user, req))


@router.post("/completions/create_stream", response_class=StreamingResponse)
async def completions_create_stream(
    user: User_,
    traces: Store,
    chat: ChatContext = Depends(chat_context),
    req: t.CompletionsCreateReq = Depends(json_body(t.CompletionsCreateReq)),
) -> StreamingResponse:
    check_project_id(req.project_id)  # answered 400 before the stream starts, not inside it
    return StreamingResponse(completions.stream(traces, chat, user, req), media_type=JSONL)
