"""The body of ``/call/upsert_batch`` decoded without pydantic on the common path.

A batch of well-formed starts and ends (the shape every client sends) is decoded by orjson and
checked field by field here, about five times faster than validating it as ``CallCreateBatchReq``.
Anything this strict check does not recognise (a missing or mistyped field, a time written another
way, a value pydantic would coerce) falls back to pydantic, which accepts it or answers the same 422
as before: the fast path only ever accepts what pydantic accepts, with the same values.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import orjson
from fastapi import Request

from ....types import traces as t
from ....types.common import INT64_MAX, INT64_MIN, utc_representable
from .wire import json_body

# the times both parsers read alike: RFC 3339 with at most microseconds, zone optional
_TIME = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?(Z|[+-][0-9]{2}:[0-9]{2})?", re.A
)
_START_STR = (
    *("id", "display_name", "trace_id", "parent_id", "thread_id", "turn_id"),
    *("wb_user_id", "wb_run_id"),
)
_END_STR = ("trace_id", "exception")


class _Fields:
    """Attribute access to a decoded start or end, with the model's defaults."""

    def __init__(self, fields: dict[str, Any]) -> None:
        self.__dict__ = fields


class _Missing(Exception):
    """The fast check gave up: pydantic decides."""


def _time(value: Any) -> datetime:
    """A time both parsers read alike and that has a UTC form (else pydantic decides: a 422)."""
    if type(value) is not str or not _TIME.fullmatch(value):
        raise _Missing
    try:
        return utc_representable(datetime.fromisoformat(value))
    except ValueError:
        raise _Missing from None


def _opt_int(value: Any) -> int | None:
    """None or an int a SQLite column holds (else pydantic decides: a 422)."""
    if value is not None and (type(value) is not int or not INT64_MIN <= value <= INT64_MAX):
        raise _Missing
    return value


def _dict(d: dict[str, Any], key: str, default: dict[str, Any] | None) -> dict[str, Any] | None:
    value = d.get(key, default)
    if type(value) is not dict and not (value is None and default is None):
        raise _Missing
    return value


def _strings(d: dict[str, Any], keys: tuple[str, ...], fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` with each of ``keys`` read from ``d``: a str or None (else pydantic decides)."""
    for key in keys:
        value = d.get(key)
        if value is not None and type(value) is not str:
            raise _Missing
        fields[key] = value
    return fields


def _start(d: Any) -> _Fields:
    if type(d) is not dict or type(d.get("project_id")) is not str or type(d.get("op_name")) is not str:
        raise _Missing
    fields = _strings(d, _START_STR, {"project_id": d["project_id"], "op_name": d["op_name"]})
    fields["wb_run_step"] = _opt_int(d.get("wb_run_step"))
    fields["started_at"] = _time(d.get("started_at"))
    fields["attributes"] = _dict(d, "attributes", {})
    fields["inputs"] = _dict(d, "inputs", {})
    fields["otel_dump"] = _dict(d, "otel_dump", None)
    return _Fields(fields)


def _end(d: Any) -> _Fields:
    if type(d) is not dict or type(d.get("project_id")) is not str or type(d.get("id")) is not str:
        raise _Missing
    fields = _strings(d, _END_STR, {"project_id": d["project_id"], "id": d["id"]})
    started = d.get("started_at")
    fields["wb_run_step_end"] = _opt_int(d.get("wb_run_step_end"))
    fields["ended_at"] = _time(d.get("ended_at"))
    fields["started_at"] = None if started is None else _time(started)
    fields["output"] = d.get("output")
    fields["summary"] = _dict(d, "summary", {})
    return _Fields(fields)


def fast_batch(raw: bytes) -> list[tuple[str, Any]] | None:
    """``(mode, start or end)`` of each item, or ``None`` when pydantic must decide."""
    try:
        body = orjson.loads(raw)
        batch = body.get("batch") if type(body) is dict else None
        if type(batch) is not list:
            return None
        items: list[tuple[str, Any]] = []
        for item in batch:
            req = item.get("req") if type(item) is dict else None
            mode = item["mode"] if type(req) is dict and "mode" in item else None
            if mode == "start":
                items.append(("start", _start(req.get("start"))))  # type: ignore[union-attr]
            elif mode == "end":
                items.append(("end", _end(req.get("end"))))  # type: ignore[union-attr]
            else:
                return None
        return items
    except (orjson.JSONDecodeError, _Missing):
        return None


_validated = json_body(t.CallCreateBatchReq)


async def batch_items(request: Request) -> list[tuple[str, Any]]:
    """A dependency: the batch's items, decoded fast or else validated by pydantic (422 as before)."""
    raw = await request.body()
    items = fast_batch(raw)
    if items is not None:
        return items
    req = await _validated(request)
    return [
        ("start", item.req.start) if isinstance(item, t.CallBatchStart) else ("end", item.req.end)
        for item in req.batch
    ]
