"""Threads: the turn calls of one ``thread_id``, aggregated."""

from __future__ import annotations

from ..common import DateTime, Int64, WireModel
from .common import SortBy


class ThreadsQueryFilter(WireModel):
    after_datetime: DateTime | None = None
    before_datetime: DateTime | None = None
    thread_ids: list[str] | None = None


class ThreadsQueryReq(WireModel):
    project_id: str
    filter: ThreadsQueryFilter | None = None
    limit: Int64 | None = None
    offset: Int64 | None = None
    sort_by: list[SortBy] | None = None


class Thread(WireModel):
    """``ThreadSchema``: the turn calls (``id == turn_id``) of one ``thread_id``, aggregated."""

    thread_id: str
    turn_count: Int64
    start_time: DateTime
    last_updated: DateTime
    first_turn_id: str | None = None
    last_turn_id: str | None = None
    p50_turn_duration_ms: float | None = None
    p99_turn_duration_ms: float | None = None
