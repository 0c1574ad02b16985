"""Call routes: ingest (v1 and the ``/v2/{entity}/{project}`` paths), read, update, delete, query, stats."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response, StreamingResponse

from ....types import traces as t
from ...errors import BadRequest
from .batch_body import batch_items
from .wire import Store, User_, json_body, jsonl, jsonl_whole, ok

router = APIRouter()
SMALL_RESULT = 1000  # a query limited to this many calls is answered in one body, not streamed


@router.post("/call/start", response_model=t.CallStartRes)
def call_start(user: User_, s: Store, req: t.CallStartReq = Depends(json_body(t.CallStartReq))) -> Response:
    return ok(s.calls.start(user.id, req.start))


@router.post("/call/end", response_model=t.Empty)
def call_end(user: User_, s: Store, req: t.CallEndReq = Depends(json_body(t.CallEndReq))) -> Response:
    s.calls.end(user.id, req.end)
    return ok({})


@router.post("/call/upsert_batch", response_model=t.CallCreateBatchRes)
def call_upsert_batch(user: User_, s: Store, items: list[tuple[str, Any]] = Depends(batch_items)) -> Response:
    return ok({"res": s.calls.upsert_batch(user.id, items)})


def _check_v2_project(entity: str, project: str, project_ids: list[str]) -> None:
    expected = f"{entity}/{project}"
    if any(p != expected for p in project_ids):
        raise BadRequest(f"project_id of every call must be {expected}")


@router.post("/v2/{entity}/{project}/calls/complete", response_model=t.Empty)
def calls_complete(
    entity: str,
    project: str,
    user: User_,
    s: Store,
    req: t.CallsCompleteReq = Depends(json_body(t.CallsCompleteReq)),
) -> Response:
    _check_v2_project(entity, project, [c.project_id for c in req.batch])
    if req.batch:
        s.calls.complete(user.id, req.batch)
    return ok({})


@router.post("/v2/{entity}/{project}/call/start", response_model=t.CallStartRes)
def v2_call_start(
    entity: str, project: str, user: User_, s: Store, req: t.CallStartReq = Depends(json_body(t.CallStartReq))
) -> Response:
    _check_v2_project(entity, project, [req.start.project_id])
    return ok(s.calls.start(user.id, req.start))


@router.post("/v2/{entity}/{project}/call/end", response_model=t.Empty)
def v2_call_end(
    entity: str, project: str, user: User_, s: Store, req: t.CallEndReq = Depends(json_body(t.CallEndReq))
) -> Response:
    _check_v2_project(entity, project, [req.end.project_id])
    s.calls.end(user.id, req.end)
    return ok({})


@router.post("/call/read", response_model=t.CallReadRes)
def call_read(user: User_, s: Store, req: t.CallReadReq = Depends(json_body(t.CallReadReq))) -> Response:
    body = s.read_call(user.id, req.project_id, req.id, req.include_costs)
    return Response(body, media_type="application/json")


@router.post("/call/update", response_model=t.Empty)
def call_update(
    user: User_, s: Store, req: t.CallUpdateReq = Depends(json_body(t.CallUpdateReq))
) -> Response:
    s.calls.update(user.id, req.project_id, req.call_id, req.display_name)
    return ok({})


@router.post("/calls/delete", response_model=t.CallsDeleteRes)
def calls_delete(
    user: User_, s: Store, req: t.CallsDeleteReq = Depends(json_body(t.CallsDeleteReq))
) -> Response:
    return ok({"num_deleted": s.calls.delete(user.id, req.project_id, req.call_ids)})


@router.post("/calls/stream_query", response_class=StreamingResponse)
def calls_stream_query(
    request: Request, user: User_, s: Store, req: t.CallsQueryReq = Depends(json_body(t.CallsQueryReq))
) -> Response:
    if req.limit is not None and req.limit <= SMALL_RESULT:
        return jsonl_whole(s.stream_calls(user.id, req), request)
    return jsonl(s.stream_calls(user.id, req), request)


@router.post("/calls/query", include_in_schema=False)
def calls_query(
    user: User_, s: Store, req: t.CallsQueryReq = Depends(json_body(t.CallsQueryReq))
) -> Response:
    found = b",".join(line for chunk in s.stream_calls(user.id, req) for line in chunk.splitlines())
    return Response(b'{"calls":[' + found + b"]}", media_type="application/json")


@router.post("/calls/query_stats", response_model=t.CallsQueryStatsRes)
def calls_query_stats(
    user: User_, s: Store, req: t.CallsQueryStatsReq = Depends(json_body(t.CallsQueryStatsReq))
) -> Response:
    if req.limit is not None and req.limit < 1:
        raise BadRequest("limit must be at least 1")
    query = t.CallsQueryReq(project_id=req.project_id, filter=req.filter, query=req.query)
    count, more = s.calls.count(user.id, query, req.limit)
    return ok({"count": count, "has_more": more, "total_storage_size_bytes": None})
