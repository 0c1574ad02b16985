"""Feedback on calls: created (one or a batch), queried, replaced and purged by id."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...types import traces as t
from .._transport import Op
from .base import AsyncResource, SyncResource, post, request


def op_feedback_create(req: t.FeedbackCreateReq) -> Op[t.FeedbackCreateRes]:
    return post("/feedback/create", req, t.FeedbackCreateRes.model_validate)


def op_feedback_batch_create(req: t.FeedbackCreateBatchReq) -> Op[t.FeedbackCreateBatchRes]:
    return post("/feedback/batch/create", req, t.FeedbackCreateBatchRes.model_validate)


def op_feedback_query(req: t.FeedbackQueryReq) -> Op[t.FeedbackQueryRes]:
    return post("/feedback/query", req, t.FeedbackQueryRes.model_validate, idempotent=True)


def op_feedback_purge(req: t.FeedbackPurgeReq) -> Op[t.Empty]:
    return post("/feedback/purge", req, t.Empty.model_validate, idempotent=True)


def op_feedback_replace(req: t.FeedbackReplaceReq) -> Op[t.FeedbackCreateRes]:
    return post("/feedback/replace", req, t.FeedbackCreateRes.model_validate)


class Feedback(SyncResource):
    def feedback_create(
        self, req: t.FeedbackCreateReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.FeedbackCreateRes:
        return self._run(op_feedback_create(request(t.FeedbackCreateReq, req, fields)))

    def feedback_batch_create(
        self, req: t.FeedbackCreateBatchReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.FeedbackCreateBatchRes:
        return self._run(op_feedback_batch_create(request(t.FeedbackCreateBatchReq, req, fields)))

    def feedback_query(
        self, req: t.FeedbackQueryReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.FeedbackQueryRes:
        return self._run(op_feedback_query(request(t.FeedbackQueryReq, req, fields)))

    def feedback_purge(
        self, req: t.FeedbackPurgeReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.Empty:
        return self._run(op_feedback_purge(request(t.FeedbackPurgeReq, req, fields)))

    def feedback_replace(
        self, req: t.FeedbackReplaceReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.FeedbackCreateRes:
        return self._run(op_feedback_replace(request(t.FeedbackReplaceReq, req, fields)))


class AsyncFeedback(AsyncResource):
    async def feedback_create(
        self, req: t.FeedbackCreateReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.FeedbackCreateRes:
        return await self._run(op_feedback_create(request(t.FeedbackCreateReq, req, fields)))

    async def feedback_batch_create(
        self, req: t.FeedbackCreateBatchReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.FeedbackCreateBatchRes:
        return await self._run(op_feedback_batch_create(request(t.FeedbackCreateBatchReq, req, fields)))

    async def feedback_query(
        self, req: t.FeedbackQueryReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.FeedbackQueryRes:
        return await self._run(op_feedback_query(request(t.FeedbackQueryReq, req, fields)))

    async def feedback_purge(
        self, req: t.FeedbackPurgeReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.Empty:
        return await self._run(op_feedback_purge(request(t.FeedbackPurgeReq, req, fields)))

    async def feedback_replace(
        self, req: t.FeedbackReplaceReq | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> t.FeedbackCreateRes:
        return await self._run(op_feedback_replace(request(t.FeedbackReplaceReq, req, fields)))
