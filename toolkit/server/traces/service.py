"""The trace service: one object holding the stores, and the call reads that need more than SQL
(costs, feedback and expanded refs added to calls on request)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from ...types.traces import CallsFilter, CallsQueryReq
from ..errors import ApiError
from .calls import Calls
from .common import to_us
from .costs import Costs, call_costs
from .feedback import Feedback
from .files import Files
from .objects import Objects
from .ref_reader import RefReader
from .refs import PREFIX
from .store import Base
from .tables import Tables
from .threads import Threads


class TraceService:
    def __init__(self, path: Path) -> None:
        self.base = Base(path)
        self.calls = Calls(self.base)
        self.objects = Objects(self.base)
        self.tables = Tables(self.base)
        self.files = Files(self.base)
        self.refs = RefReader(self.objects, self.tables)
        self.feedback = Feedback(self.base)
        self.costs = Costs(self.base)
        self.threads = Threads(self.base)

    def close(self) -> None:
        self.base.close()

    def stream_calls(self, user_id: str, req: CallsQueryReq) -> Iterator[bytes]:
        """JSON Lines of the matching calls, a chunk of lines at a time (validated before the first)."""
        chunks = self.calls.stream(user_id, req)
        enrich = req.include_costs or req.include_feedback or bool(req.expand_columns)
        pid = self.base.pid(user_id, req.project_id)

        def lines() -> Iterator[bytes]:
            for chunk in chunks:
                if enrich and pid is not None:
                    chunk = self._enrich(user_id, pid, req, chunk)
                yield b"\n".join(chunk) + b"\n"

        return lines()

    def read_call(self, user_id: str, project_id: str, call_id: str, include_costs: bool) -> bytes:
        """The body of ``/call/read``: ``{"call": <call or null>}``."""
        req = CallsQueryReq(
            project_id=project_id,
            filter=CallsFilter(call_ids=[call_id]),
            limit=1,
            include_costs=include_costs,
        )
        found = [line for chunk in self.stream_calls(user_id, req) for line in chunk.splitlines()]
        return b'{"call":' + (found[0] if found else b"null") + b"}"

    def _enrich(self, user_id: str, pid: int, req: CallsQueryReq, chunk: list[bytes]) -> list[bytes]:
        calls = [orjson.loads(line) for line in chunk]
        conn = self.base.db.conn
        if req.include_feedback:
            found = self.feedback.for_calls(conn, pid, req.project_id, [c["id"] for c in calls])
            for c in calls:
                _weave(c)["feedback"] = found.get(c["id"], [])
        if req.include_costs:
            models = {m for c in calls for m in _usage(c)}
            prices = self.costs.prices(conn, pid, sorted(models))
            for c in calls:
                usage = _usage(c)
                if usage:
                    started = to_us(datetime.fromisoformat(c["started_at"]))
                    _weave(c)["costs"] = call_costs(usage, prices, started)
        if req.expand_columns:
            cache: dict[str, Any] = {}
            for c in calls:
                for path in req.expand_columns:
                    self._expand(user_id, c, path.split("."), cache)
        return [orjson.dumps(c) for c in calls]

    def _expand(self, user_id: str, node: Any, path: list[str], cache: dict[str, Any]) -> None:
        """Replace the ref at ``path`` by the value it points to (a dict keeps the ref under ``_ref``)."""
        for part in path[:-1]:
            if not isinstance(node, dict) or part not in node:
                return
            node = node[part]
        last = path[-1]
        if (
            not isinstance(node, dict)
            or not isinstance(node.get(last), str)
            or not node[last].startswith(PREFIX)
        ):
            return
        ref = node[last]
        if ref not in cache:
            try:
                cache[ref] = self.refs.read(user_id, [ref])[0]
            except ApiError:
                cache[ref] = None
        value = cache[ref]
        if value is not None:
            node[last] = {**value, "_ref": ref} if isinstance(value, dict) else value


def _weave(call: dict[str, Any]) -> dict[str, Any]:
    summary = call.setdefault("summary", {}) or {}
    call["summary"] = summary
    weave: dict[str, Any] = summary.setdefault("weave", {})
    return weave


def _usage(call: dict[str, Any]) -> dict[str, Any]:
    usage = (call.get("summary") or {}).get("usage")
    return usage if isinstance(usage, dict) else {}
