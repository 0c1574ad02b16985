"""Table routes: create, update, query (whole or streamed), stats."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response, StreamingResponse

from ....types import traces as t
from .wire import Store, User_, json_body, jsonl, lines, ok

router = APIRouter()


@router.post("/table/create", response_model=t.TableCreateRes)
def table_create(
    user: User_, s: Store, req: t.TableCreateReq = Depends(json_body(t.TableCreateReq))
) -> Response:
    table = req.table
    digest, rows = s.tables.create(user.id, table.project_id, table.rows, table.expected_digest)
    return ok({"digest": digest, "row_digests": rows})


@router.post("/table/update", response_model=t.TableUpdateRes)
def table_update(
    user: User_, s: Store, req: t.TableUpdateReq = Depends(json_body(t.TableUpdateReq))
) -> Response:
    digest, updated = s.tables.update(user.id, req.project_id, req.base_digest, req.updates)
    return ok({"digest": digest, "updated_row_digests": updated})


@router.post("/table/query", response_model=t.TableQueryRes)
def table_query(
    user: User_, s: Store, req: t.TableQueryReq = Depends(json_body(t.TableQueryReq))
) -> Response:
    rows = ",".join(row for chunk in s.tables.rows(user.id, req) for row in chunk)
    return Response(f'{{"rows":[{rows}]}}'.encode(), media_type="application/json")


@router.post("/table/query_stream", response_class=StreamingResponse)
def table_query_stream(
    request: Request, user: User_, s: Store, req: t.TableQueryReq = Depends(json_body(t.TableQueryReq))
) -> StreamingResponse:
    return jsonl(lines(s.tables.rows(user.id, req)), request)


@router.post("/table/query_stats", response_model=t.TableQueryStatsRes)
def table_query_stats(
    user: User_, s: Store, req: t.TableQueryStatsReq = Depends(json_body(t.TableQueryStatsReq))
) -> Response:
    return ok({"count": s.tables.count(user.id, req.project_id, req.digest)})
