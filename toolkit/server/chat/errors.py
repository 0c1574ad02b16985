"""The chat endpoint's errors, answered in vLLM's shape ``{"error": {message, type, param, code}}``.

400 ``BadRequestError`` for checks with vLLM's messages (:func:`invalid`), 400 ``Bad Request`` for
field validation (:class:`InvalidRequest`), 404 for unknown models. Checks vLLM runs inside its engine
raise :class:`EngineRejected`, which a stream reports as an error event instead of a 400.
"""

from __future__ import annotations

from typing import Any

from ..errors import ApiError, BadRequest

NO_VALUE: Any = object()


class InvalidRequest(BadRequest):
    """A field failed validation: vLLM's ``"N validation error(s): ..."`` message, type ``Bad Request``."""

    error_type = "Bad Request"


class EngineRejected(BadRequest):
    """A check vLLM makes inside its engine: after a stream began, an error event instead of a 400."""


class EngineError(ApiError):
    status = 500
    error_type = "InternalServerError"


class DeadlineExceeded(ApiError):
    """The request ran past the server's deadline: 504 in vLLM's shape (its type the HTTP phrase, as
    vLLM's graceful HTTP errors)."""

    status = 504
    error_type = "Gateway Timeout"


class ClientClosedRequest(ApiError):
    """The client went away before the answer (nginx's 499; nobody reads it)."""

    status = 499
    error_type = "Client Closed Request"


def invalid(
    message: str, param: str | None = None, value: Any = NO_VALUE, cls: type[BadRequest] = BadRequest
) -> BadRequest:
    """vLLM's ``VLLMValidationError``: the message ends with ``(parameter=P, value=V)`` when given."""
    parts = [f"parameter={param}"] if param else []
    if value is not NO_VALUE:
        parts.append(f"value={value}")
    return cls(f"{message} ({', '.join(parts)})" if parts else message, param=param)
