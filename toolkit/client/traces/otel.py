"""OpenTelemetry: OTLP JSON trace exports stored as calls."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...types import traces as t
from .._transport import Op
from .base import AsyncResource, SyncResource


def op_otel_export(otlp: Mapping[str, Any], project_id: str | None) -> Op[t.OtelExportRes]:
    """An OTLP JSON ``ExportTraceServiceRequest`` (``{"resourceSpans": [...]}``) to ``/otel/v1/trace``.

    OTLP exporters can also send protobuf straight to ``<trace_url>/otel/v1/traces``.
    """
    payload = {**otlp, "project_id": project_id} if project_id else dict(otlp)
    return Op("POST", "/otel/v1/trace", t.OtelExportRes.model_validate, service="traces", json=payload)


class Otel(SyncResource):
    def otel_export(self, otlp: Mapping[str, Any], project_id: str | None = None) -> t.OtelExportRes:
        return self._run(op_otel_export(otlp, project_id))


class AsyncOtel(AsyncResource):
    async def otel_export(self, otlp: Mapping[str, Any], project_id: str | None = None) -> t.OtelExportRes:
        return await self._run(op_otel_export(otlp, project_id))
