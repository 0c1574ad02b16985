"""HTTP routes of the trace service under ``/traces`` (Weave's trace-server paths and bodies), one
module per noun; :mod:`.wire` says how bodies are read and answers written."""

from __future__ import annotations

from fastapi import APIRouter

from . import calls, completions, costs, feedback, files, objects, otel, refs, service, tables, threads

router = APIRouter(prefix="/traces", tags=["traces"])
for _module in (service, calls, objects, tables, refs, files, costs, feedback, threads, completions, otel):
    router.include_router(_module.router)
