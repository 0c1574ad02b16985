"""HTTP routes of the trace service under ``/traces`` (Weave's trace-server paths and bodies).

Bodies are JSON whatever the Content-Type (old Weave clients send none) and are parsed by pydantic
straight from bytes; streams are JSON Lines, one object per line, no blank lines.
"""

from __future__ import annotations

import zlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Annotated, Any, TypeVar

import orjson
from fastapi import APIRouter, Depends, File, Form, Header, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response, StreamingResponse
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool

from ..._version import __version__
from ...types import traces as t
from ..auth import current_user
from ..errors import BadRequest, PayloadTooLarge
from ..state import Services, services
from ..store.users import User
from . import completions, otel
from .service import TraceService
from .store import check_project_id

M = TypeVar("M", bound=BaseModel)
JSONL = "application/jsonl"
STREAM_TYPES = (
    "application/jsonl",
    "application/x-ndjson",
    "application/json-lines",
    "application/x-jsonlines",
)
MIN_WEAVE_VERSION = "0.0.1"

router = APIRouter(prefix="/traces", tags=["traces"])


def json_body(model: type[M]) -> Callable[[Request], Awaitable[M]]:
    """A dependency parsing the request body as ``model`` (422 in the trace service's shape)."""

    async def parse(request: Request) -> M:
        raw = await request.body()
        try:
            return model.model_validate_json(raw)
        except ValidationError as exc:
            raise RequestValidationError(exc.errors(include_url=False), body=raw) from exc

    return parse


def store(svc: Services = Depends(services)) -> TraceService:
    traces: TraceService = svc.traces
    return traces


User_ = Annotated[User, Depends(current_user)]
Store = Annotated[TraceService, Depends(store)]


def ok(value: Any) -> Response:
    """A JSON response (pydantic models dumped without unset defaults)."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json", by_alias=True)
    return Response(orjson.dumps(value), media_type="application/json")


def jsonl(chunks: Iterator[bytes], request: Request | None = None) -> StreamingResponse:
    accept = request.headers.get("accept", "") if request is not None else ""
    media = next((m for m in STREAM_TYPES if m in accept), JSONL)
    return StreamingResponse(chunks, media_type=media)


def lines(items: Iterator[list[str]]) -> Iterator[bytes]:
    for chunk in items:
        if chunk:
            yield ("\n".join(chunk) + "\n").encode()


def _sort(sort_by: list[t.SortBy] | None) -> list[tuple[str, str]]:
    return [(s.field, s.direction) for s in sort_by or []]


# ----------------------------------------------------------------------------- service


@router.get("/health", response_model=t.TraceHealth)
def health(_: User_) -> Response:
    return ok({"status": "ok"})


@router.get("/server_info", response_model=t.ServerInfo)
def server_info(_: User_) -> Response:
    return ok({"min_required_weave_python_version": MIN_WEAVE_VERSION, "trace_server_version": __version__})


# ----------------------------------------------------------------------------- calls


@router.post("/call/start", response_model=t.CallStartRes)
def call_start(user: User_, s: Store, req: t.CallStartReq = Depends(json_body(t.CallStartReq))) -> Response:
    return ok(s.calls.start(user.id, req.start))


@router.post("/call/end", response_model=t.Empty)
def call_end(user: User_, s: Store, req: t.CallEndReq = Depends(json_body(t.CallEndReq))) -> Response:
    s.calls.end(user.id, req.end)
    return ok({})


@router.post("/call/upsert_batch", response_model=t.CallCreateBatchRes)
def call_upsert_batch(
    user: User_, s: Store, req: t.CallCreateBatchReq = Depends(json_body(t.CallCreateBatchReq))
) -> Response:
    return ok({"res": s.calls.upsert_batch(user.id, req)})


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
) -> StreamingResponse:
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


# ----------------------------------------------------------------------------- objects


@router.post("/obj/create", response_model=t.ObjCreateRes)
def obj_create(user: User_, s: Store, req: t.ObjCreateReq = Depends(json_body(t.ObjCreateReq))) -> Response:
    return ok({"digest": s.objects.create(user.id, req.obj), "object_id": req.obj.object_id})


@router.post("/obj/read", response_model=t.ObjReadRes)
def obj_read(user: User_, s: Store, req: t.ObjReadReq = Depends(json_body(t.ObjReadReq))) -> Response:
    obj = s.objects.read(
        user.id, req.project_id, req.object_id, req.digest, req.metadata_only, req.include_tags_and_aliases
    )
    return ok({"obj": obj})


@router.post("/objs/query", response_model=t.ObjQueryRes)
def objs_query(user: User_, s: Store, req: t.ObjQueryReq = Depends(json_body(t.ObjQueryReq))) -> Response:
    objs = s.objects.query(
        user.id,
        req.project_id,
        req.filter,
        req.limit,
        req.offset,
        _sort(req.sort_by),
        req.metadata_only,
        req.include_tags_and_aliases,
    )
    return ok({"objs": objs})


@router.post("/obj/delete", response_model=t.ObjDeleteRes)
def obj_delete(user: User_, s: Store, req: t.ObjDeleteReq = Depends(json_body(t.ObjDeleteReq))) -> Response:
    deleted = s.objects.delete(user.id, req.project_id, req.object_id, req.digests)
    return ok({"num_deleted": len(deleted), "deleted_versions": deleted})


# ----------------------------------------------------------------------------- tables, refs, files


@router.post("/table/create", response_model=t.TableCreateRes)
def table_create(
    user: User_, s: Store, req: t.TableCreateReq = Depends(json_body(t.TableCreateReq))
) -> Response:
    table = req.table
    digest, rows = s.objects.table_create(user.id, table.project_id, table.rows, table.expected_digest)
    return ok({"digest": digest, "row_digests": rows})


@router.post("/table/update", response_model=t.TableUpdateRes)
def table_update(
    user: User_, s: Store, req: t.TableUpdateReq = Depends(json_body(t.TableUpdateReq))
) -> Response:
    digest, updated = s.objects.table_update(user.id, req.project_id, req.base_digest, req.updates)
    return ok({"digest": digest, "updated_row_digests": updated})


@router.post("/table/query", response_model=t.TableQueryRes)
def table_query(
    user: User_, s: Store, req: t.TableQueryReq = Depends(json_body(t.TableQueryReq))
) -> Response:
    rows = ",".join(row for chunk in s.objects.table_rows(user.id, req) for row in chunk)
    return Response(f'{{"rows":[{rows}]}}'.encode(), media_type="application/json")


@router.post("/table/query_stream", response_class=StreamingResponse)
def table_query_stream(
    request: Request, user: User_, s: Store, req: t.TableQueryReq = Depends(json_body(t.TableQueryReq))
) -> StreamingResponse:
    return jsonl(lines(s.objects.table_rows(user.id, req)), request)


@router.post("/table/query_stats", response_model=t.TableQueryStatsRes)
def table_query_stats(
    user: User_, s: Store, req: t.TableQueryStatsReq = Depends(json_body(t.TableQueryStatsReq))
) -> Response:
    return ok({"count": s.objects.table_count(user.id, req.project_id, req.digest)})


@router.post("/refs/read_batch", response_model=t.RefsReadBatchRes)
def refs_read_batch(
    user: User_, s: Store, req: t.RefsReadBatchReq = Depends(json_body(t.RefsReadBatchReq))
) -> Response:
    return ok({"vals": s.objects.read_refs(user.id, req.refs)})


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
    digest = await run_in_threadpool(
        s.objects.file_create, user.id, project_id, name, content, expected_digest
    )
    return ok({"digest": digest})


@router.post("/file/content", response_class=Response)
@router.post("/files/content", response_class=Response, include_in_schema=False)
def file_content(
    user: User_, s: Store, req: t.FileContentReadReq = Depends(json_body(t.FileContentReadReq))
) -> Response:
    return Response(
        s.objects.file_content(user.id, req.project_id, req.digest), media_type="application/octet-stream"
    )


# ----------------------------------------------------------------------------- costs


@router.post("/cost/create", response_model=t.CostCreateRes)
def cost_create(
    user: User_, s: Store, req: t.CostCreateReq = Depends(json_body(t.CostCreateReq))
) -> Response:
    return ok({"ids": s.costs.create(user.id, req.project_id, req.costs)})


@router.post("/cost/query", response_model=t.CostQueryRes)
def cost_query(user: User_, s: Store, req: t.CostQueryReq = Depends(json_body(t.CostQueryReq))) -> Response:
    expr = req.query.expr if req.query else None
    results = s.costs.query(
        user.id, req.project_id, req.fields, expr, _sort(req.sort_by), req.limit, req.offset
    )
    return ok({"results": results})


@router.post("/cost/purge", response_model=t.Empty)
def cost_purge(user: User_, s: Store, req: t.CostPurgeReq = Depends(json_body(t.CostPurgeReq))) -> Response:
    s.costs.purge(user.id, req.project_id, req.query.expr)
    return ok({})


# ----------------------------------------------------------------------------- feedback


@router.post("/feedback/create", response_model=t.FeedbackCreateRes)
def feedback_create(
    user: User_, s: Store, req: t.FeedbackCreateReq = Depends(json_body(t.FeedbackCreateReq))
) -> Response:
    return ok(s.feedback.create(user.id, [req])[0])


@router.post("/feedback/batch/create", response_model=t.FeedbackCreateBatchRes)
def feedback_batch_create(
    user: User_, s: Store, req: t.FeedbackCreateBatchReq = Depends(json_body(t.FeedbackCreateBatchReq))
) -> Response:
    return ok({"res": s.feedback.create(user.id, req.batch)})


@router.post("/feedback/query", response_model=t.FeedbackQueryRes)
def feedback_query(
    user: User_, s: Store, req: t.FeedbackQueryReq = Depends(json_body(t.FeedbackQueryReq))
) -> Response:
    expr = req.query.expr if req.query else None
    rows, total = s.feedback.query(
        user.id, req.project_id, req.fields, expr, _sort(req.sort_by), req.limit, req.offset
    )
    return ok({"result": rows, "total_count": total})


@router.post("/feedback/purge", response_model=t.Empty)
def feedback_purge(
    user: User_, s: Store, req: t.FeedbackPurgeReq = Depends(json_body(t.FeedbackPurgeReq))
) -> Response:
    s.feedback.purge_query(user.id, req.project_id, req.query.expr)
    return ok({})


@router.post("/feedback/replace", response_model=t.FeedbackCreateRes)
def feedback_replace(
    user: User_, s: Store, req: t.FeedbackReplaceReq = Depends(json_body(t.FeedbackReplaceReq))
) -> Response:
    return ok(s.feedback.replace(user.id, req.feedback_id, req))


# ----------------------------------------------------------------------------- threads


@router.post("/threads/stream_query", response_class=StreamingResponse)
def threads_stream_query(
    user: User_, s: Store, req: t.ThreadsQueryReq = Depends(json_body(t.ThreadsQueryReq))
) -> StreamingResponse:
    threads = s.threads.query(user.id, req)
    return jsonl(iter([b"".join(orjson.dumps(th) + b"\n" for th in threads)] if threads else []))


# ----------------------------------------------------------------------------- completions


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


# ----------------------------------------------------------------------------- OpenTelemetry


def _export(
    user: User, s: TraceService, request_pb: ExportTraceServiceRequest, project: str | None
) -> tuple[int, str]:
    """Store the spans as calls; how many were rejected and why."""
    calls, errors = otel.decode(request_pb, project)
    if calls:
        s.calls.complete(user.id, calls)
    return len(errors), "; ".join(errors[: otel.MAX_ERRORS])


async def _otlp_body(request: Request) -> bytes:
    """The export body, gunzipped when sent with ``Content-Encoding: gzip``; the inflated size is
    capped like any request body (413), and a body that is not gzip is a 400."""
    raw = await request.body()
    if request.headers.get("content-encoding", "").lower() != "gzip":
        return raw
    limit = request.app.state.services.settings.max_body_bytes
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        body = inflater.decompress(raw, limit + 1)
    except zlib.error as exc:
        raise BadRequest(f"Invalid gzip body: {exc}") from exc
    if len(body) > limit or inflater.unconsumed_tail:
        raise PayloadTooLarge(f"Request body larger than {limit} bytes once decompressed")
    return body


@router.post(
    "/otel/v1/traces",
    responses={200: {"content": {"application/x-protobuf": {}, "application/json": {}}}},
)
async def otel_traces(
    request: Request,
    user: User_,
    s: Store,
    project_id: Annotated[str | None, Header(alias="project_id", convert_underscores=False)] = None,
) -> Response:
    """OTLP/HTTP export: protobuf (``application/x-protobuf``) or OTLP JSON; answered in kind."""
    raw = await _otlp_body(request)
    is_json = "json" in request.headers.get("content-type", "")
    try:
        message = otel.from_json(orjson.loads(raw)) if is_json else ExportTraceServiceRequest.FromString(raw)
    except (DecodeError, orjson.JSONDecodeError) as exc:
        raise BadRequest(f"Invalid OTLP trace export: {exc}") from exc
    rejected, error = await run_in_threadpool(_export, user, s, message, project_id)
    if is_json:
        partial = {"rejected_spans": rejected, "error_message": error} if rejected else None
        return ok({"partial_success": partial})
    reply = ExportTraceServiceResponse()
    if rejected:
        reply.partial_success.CopyFrom(
            ExportTracePartialSuccess(rejected_spans=rejected, error_message=error)
        )
    return Response(reply.SerializeToString(), media_type="application/x-protobuf")


@router.post("/otel/v1/trace", response_model=t.OtelExportRes)
async def otel_trace_json(
    request: Request,
    user: User_,
    s: Store,
    project_id: Annotated[str | None, Header(alias="project_id", convert_underscores=False)] = None,
) -> Response:
    """OTLP JSON export (``{"resourceSpans": [...]}``), project from the header or ``project_id``."""
    raw = await _otlp_body(request)
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"Invalid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise BadRequest("Expected a JSON object")
    project = project_id or body.pop("project_id", None)
    body.pop("wb_user_id", None)
    message = otel.from_json(body)
    rejected, error = await run_in_threadpool(_export, user, s, message, project)
    partial = {"rejected_spans": rejected, "error_message": error} if rejected else None
    return ok({"partial_success": partial})
