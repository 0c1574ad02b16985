"""Error bodies of the three services."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class ValidationErrorItem(BaseModel):
    """One entry of the training API's 422 body."""

    loc: list[str | int]
    msg: str
    type: str


class HTTPValidationError(BaseModel):
    """Training API validation failure: 422 ``{"detail": [{loc, msg, type}]}``."""

    detail: list[ValidationErrorItem]


class DetailError(BaseModel):
    """Training API failure other than validation, e.g. 404 ``{"detail": "Model not found"}``."""

    detail: str


class OpenAIErrorInfo(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: int


class OpenAIErrorResponse(BaseModel):
    """Chat endpoint failure in vLLM's shape: ``{"error": {message, type, param, code}}``."""

    error: OpenAIErrorInfo


class TraceErrorResponse(BaseModel):
    """Trace service failure in Weave's shape: ``{"reason": ...}`` plus optional extras."""

    reason: str
    error_code: str | None = None

    model_config = {"extra": "allow"}

    def extras(self) -> dict[str, Any]:
        return dict(self.model_extra or {})
