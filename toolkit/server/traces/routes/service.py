"""Health and version of the trace service."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from ...._version import __version__
from ....types import traces as t
from .wire import User_, ok

MIN_WEAVE_VERSION = "0.0.1"

router = APIRouter()


@router.get("/health", response_model=t.TraceHealth)
def health(_: User_) -> Response:
    return ok({"status": "ok"})


@router.get("/server_info", response_model=t.ServerInfo)
def server_info(_: User_) -> Response:
    return ok({"min_required_weave_python_version": MIN_WEAVE_VERSION, "trace_server_version": __version__})
