"""Thread routes: the streamed thread query."""

from __future__ import annotations

import orjson
from fastapi import APIRouter, Depends
from fastapi.responses import StreamingResponse

from ....types import traces as t
from .wire import Store, User_, json_body, jsonl

router = APIRouter()


@router.post("/threads/stream_query", response_class=StreamingResponse)
def threads_stream_query(
    user: User_, s: Store, req: t.ThreadsQueryReq = Depends(json_body(t.ThreadsQueryReq))
) -> StreamingResponse:
    threads = s.threads.query(user.id, req)
    return jsonl(iter([b"".join(orjson.dumps(th) + b"\n" for th in threads)] if threads else []))
