"""Threads: the turn calls (``id == turn_id``) of each ``thread_id``, aggregated."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...types.traces import ThreadsQueryReq
from ..errors import BadRequest
from .common import iso, to_us
from .store import Base

SORT_FIELDS = (
    "thread_id",
    "turn_count",
    "start_time",
    "last_updated",
    "p50_turn_duration_ms",
    "p99_turn_duration_ms",
)


def _quantile(values: list[int], q: float) -> float | None:
    """Linear-interpolated quantile of durations in ms."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return float(ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo))


def _thread(thread_id: str, turns: list[Any]) -> dict[str, Any] | None:
    ended = [t for t in turns if t["ended_at"] is not None]
    if not ended:
        return None
    first = min(turns, key=lambda t: t["started_at"])
    last = max(ended, key=lambda t: t["ended_at"])
    durations = [(t["ended_at"] - t["started_at"]) // 1000 for t in ended]
    return {
        "thread_id": thread_id,
        "turn_count": len(turns),
        "start_time": first["started_at"],
        "last_updated": last["ended_at"],
        "first_turn_id": first["id"],
        "last_turn_id": last["id"],
        "p50_turn_duration_ms": _quantile(durations, 0.5),
        "p99_turn_duration_ms": _quantile(durations, 0.99),
    }


def _sort_key(name: str) -> Callable[[dict[str, Any]], tuple[bool, Any]]:
    return lambda thread: (thread[name] is None, thread[name])


class Threads:
    def __init__(self, base: Base) -> None:
        self.base = base

    def query(self, user_id: str, req: ThreadsQueryReq) -> list[dict[str, Any]]:
        sort = [(s.field, s.direction) for s in req.sort_by or []] or [("last_updated", "desc")]
        for name, _ in sort:
            if name not in SORT_FIELDS:
                raise BadRequest(f"Invalid sort field for threads: {name}")
        pid = self.base.pid(user_id, req.project_id)
        if pid is None:
            return []
        where = ["pid = ?", "deleted_at IS NULL", "turn_id = id", "thread_id IS NOT NULL", "thread_id != ''"]
        params: list[Any] = [pid]
        f = req.filter
        if f is not None:
            if f.thread_ids is not None:
                where.append(f"thread_id IN ({', '.join('?' * len(f.thread_ids))})" if f.thread_ids else "0")
                params.extend(f.thread_ids)
            if f.after_datetime is not None:
                where.append("started_at > ?")
                params.append(to_us(f.after_datetime))
            if f.before_datetime is not None:
                where.append("started_at < ?")
                params.append(to_us(f.before_datetime))
        rows = self.base.db.conn.execute(
            f"SELECT thread_id, id, started_at, ended_at FROM calls WHERE {' AND '.join(where)}"
            " ORDER BY thread_id",
            params,
        )
        threads: list[dict[str, Any]] = []
        current: str | None = None
        turns: list[Any] = []
        for row in [*rows, None]:
            if row is None or row["thread_id"] != current:
                if current is not None and (t := _thread(current, turns)) is not None:
                    threads.append(t)
                if row is None:
                    break
                current, turns = row["thread_id"], []
            turns.append(row)
        for name, direction in reversed(sort):
            threads.sort(key=_sort_key(name), reverse=direction.lower() == "desc")
        start = req.offset or 0
        end = start + req.limit if req.limit is not None else None
        page = threads[start:end]
        for t in page:
            t["start_time"], t["last_updated"] = iso(t["start_time"]), iso(t["last_updated"])
        return page
