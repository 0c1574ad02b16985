"""File routes: multipart upload, raw content."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, File, Form, UploadFile
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from ....types import traces as t
from .wire import Store, User_, json_body, ok

router = APIRouter()


@router.post("/file/create", response_model=t.FileCreateRes)
@router.post("/files/create", response_model=t.FileCreateRes, include_in_schema=False)
async def file_create(
    user: User_,
    s: Store,
    project_id: Annotated[str, Form()],
    file: Annotated[UploadFile, File()],
    expected_digest: Annotated[str | None, Form()] = None,
) -> Response:
    content = await file.read()
    name = file.filename or "<unnamed_file>"
    digest = await run_in_threadpool(s.files.create, user.id, project_id, name, content, expected_digest)
    return ok({"digest": digest})


@router.post("/file/content", response_class=Response)
@router.post("/files/content", response_class=Response, include_in_schema=False)
def file_content(
    user: User_, s: Store, req: t.FileContentReadReq = Depends(json_body(t.FileContentReadReq))
) -> Response:
    return Response(
        s.files.content(user.id, req.project_id, req.digest), media_type="application/octet-stream"
    )
