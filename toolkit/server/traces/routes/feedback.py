"""Feedback routes: create (one or a batch), query, purge, replace."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from ....types import traces as t
from .wire import Store, User_, json_body, ok, sort_pairs

router = APIRouter()


@router.post("/feedback/create", response_model=t.FeedbackCreateRes)
def feedback_create(
    user: User_, s: Store, req: t.FeedbackCreateReq = Depends(json_body(t.FeedbackCreateReq))
) -> Response:
    return ok(s.feedback.create(user.id, [req])[0])


@router.post("/feedback/batch/create", response_model=t.FeedbackCreateBatchRes)
def feedback_batch_create(
    user: User_, s: Store, req: t.FeedbackCreateBatchReq = Depends(json_body(t.FeedbackCreateBatchReq))
) -> Response:
    return ok({"res": s.feedback.create(user.id, req.batch)})


@router.post("/feedback/query", response_model=t.FeedbackQueryRes)
def feedback_query(
    user: User_, s: Store, req: t.FeedbackQueryReq = Depends(json_body(t.FeedbackQueryReq))
) -> Response:
    expr = req.query.expr if req.query else None
    rows, total = s.feedback.query(
        user.id, req.project_id, req.fields, expr, sort_pairs(req.sort_by), req.limit, req.offset
    )
    return ok({"result": rows, "total_count": total})


@router.post("/feedback/purge", response_model=t.Empty)
def feedback_purge(
    user: User_, s: Store, req: t.FeedbackPurgeReq = Depends(json_body(t.FeedbackPurgeReq))
) -> Response:
    s.feedback.purge_query(user.id, req.project_id, req.query.expr)
    return ok({})


@router.post("/feedback/replace", response_model=t.FeedbackCreateRes)
def feedback_replace(
    user: User_, s: Store, req: t.FeedbackReplaceReq = Depends(json_body(t.FeedbackReplaceReq))
) -> Response:
    return ok(s.feedback.replace(user.id, req.feedback_id, req))
