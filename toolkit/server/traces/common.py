"""Small helpers of the trace store: times as integer microseconds, JSON text (and ids)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from ...types.traces import uuid7

__all__ = ["dumps", "from_us", "iso", "iso_sql", "loads", "now_us", "to_us", "uuid7"]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
NAIVE_EPOCH = datetime(1970, 1, 1)


def to_us(dt: datetime) -> int:
    """Microseconds since the epoch; naive datetimes are taken as UTC."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    since = dt - EPOCH  # summed by hand: four times faster than dividing by a microsecond
    return (since.days * 86400 + since.seconds) * 1_000_000 + since.microseconds


def from_us(us: int | None) -> datetime | None:
    return None if us is None else EPOCH + timedelta(microseconds=us)


def iso(us: int | None) -> str | None:
    """The wire form of a stored time: ``2025-06-01T12:00:00.123456Z``."""
    if us is None:
        return None
    return (NAIVE_EPOCH + timedelta(microseconds=us)).isoformat(timespec="microseconds") + "Z"


def now_us() -> int:
    return time.time_ns() // 1000


def iso_sql(column: str) -> str:
    """SQL rendering a microsecond column as the same text as :func:`iso` (NULL stays NULL); times
    before 1970 too (SQLite's ``%`` keeps the sign, so the fraction is taken modulo first)."""
    fraction = f"(({column} % 1000000 + 1000000) % 1000000)"
    return (
        f"(strftime('%Y-%m-%dT%H:%M:%S', ({column} - {fraction}) / 1000000, 'unixepoch')"
        f" || printf('.%06dZ', {fraction}))"
    )


_UTC = orjson.OPT_UTC_Z | orjson.OPT_NAIVE_UTC


def _time_text(value: Any) -> str | None:
    if isinstance(value, datetime):
        return iso(to_us(value))
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def dumps(value: Any) -> str:
    """Compact JSON text (orjson; the standard library for what orjson refuses, e.g. huge ints);
    datetimes are written in UTC with a ``Z``."""
    try:
        return orjson.dumps(value, option=_UTC).decode()
    except TypeError:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_time_text)


def loads(text: str | bytes | None) -> Any:
    return None if text is None else orjson.loads(text)
