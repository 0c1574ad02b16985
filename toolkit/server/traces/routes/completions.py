"""Completion routes: chat completions run on the local engine and recorded as calls."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import Response, StreamingResponse

from ....types import traces as t
from ...state import Services, services
from .. import completions
from ..store import check_project_id
from .wire import JSONL, User_, json_body, ok

router = APIRouter()


@router.post("/completions/create", response_model=t.CompletionsCreateRes)
async def completions_create(
    user: User_,
    svc: Services = Depends(services),
    req: t.CompletionsCreateReq = Depends(json_body(t.CompletionsCreateReq)),
) -> Response:
    return ok(await completions.create(svc, user, req))


@router.post("/completions/create_stream", response_class=StreamingResponse)
async def completions_create_stream(
    user: User_,
    svc: Services = Depends(services),
    req: t.CompletionsCreateReq = Depends(json_body(t.CompletionsCreateReq)),
) -> StreamingResponse:
    check_project_id(req.project_id)  # answered 400 before the stream starts, not inside it
    return StreamingResponse(completions.stream(svc, user, req), media_type=JSONL)
