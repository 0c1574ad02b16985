"""OpenTelemetry routes: OTLP/HTTP export (protobuf or JSON, optionally gzip) stored as calls."""

from __future__ import annotations

import zlib
from typing import Annotated

import orjson
from fastapi import APIRouter, Header, Request
from fastapi.responses import Response
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from starlette.concurrency import run_in_threadpool

from ....types import traces as t
from ...errors import BadRequest, PayloadTooLarge
from ...store.users import User
from .. import otel
from ..service import TraceService
from .wire import Store, User_, ok

router = APIRouter()


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
    limit: int = request.app.state.max_body_bytes
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
