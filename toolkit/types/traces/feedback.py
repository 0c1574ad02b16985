"""Feedback: reactions, notes and custom payloads attached to calls (or any ref)."""

from __future__ import annotations

from typing import Any

from ..common import DateTime, Int64, WireModel
from .common import Query, SortBy


class FeedbackCreateReq(WireModel):
    project_id: str
    weave_ref: str
    feedback_type: str
    payload: dict[str, Any]
    id: str | None = None
    creator: str | None = None
    annotation_ref: str | None = None
    runnable_ref: str | None = None
    call_ref: str | None = None
    trigger_ref: str | None = None
    queue_id: str | None = None
    wb_user_id: str | None = None


class FeedbackCreateRes(WireModel):
    id: str
    created_at: DateTime
    wb_user_id: str
    payload: dict[str, Any]


class FeedbackCreateBatchReq(WireModel):
    batch: list[FeedbackCreateReq]


class FeedbackCreateBatchRes(WireModel):
    res: list[FeedbackCreateRes]


class FeedbackQueryReq(WireModel):
    project_id: str
    fields: list[str] | None = None
    query: Query | None = None
    sort_by: list[SortBy] | None = None
    limit: Int64 | None = None
    offset: Int64 | None = None


class FeedbackQueryRes(WireModel):
    result: list[dict[str, Any]]
    total_count: Int64 = 0


class FeedbackPurgeReq(WireModel):
    project_id: str
    query: Query


class FeedbackReplaceReq(FeedbackCreateReq):
    feedback_id: str
