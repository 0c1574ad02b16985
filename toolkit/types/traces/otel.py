"""OpenTelemetry export answers (OTLP JSON form)."""

from __future__ import annotations

from ..common import Int64, WireModel


class OtelPartialSuccess(WireModel):
    rejected_spans: Int64 = 0
    error_message: str = ""


class OtelExportRes(WireModel):
    partial_success: OtelPartialSuccess | None = None
