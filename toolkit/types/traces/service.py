"""The service itself: health and version."""

from __future__ import annotations

from ..common import WireModel


class ServerInfo(WireModel):
    min_required_weave_python_version: str
    trace_server_version: str


class TraceHealth(WireModel):
    status: str = "ok"
