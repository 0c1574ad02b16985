"""Exceptions raised by the client, named by HTTP status (openai-python's scheme)."""

from __future__ import annotations

from typing import Any

import httpx

from ..types.errors import ValidationErrorItem


class OneLine:
    """Mixed into an error whose message says what went wrong and what to do: IPython shows it as one
    line (``Name: message``), without a traceback."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


class APIError(Exception):
    """Base of every client error."""

    def __init__(self, message: str, *, request: httpx.Request | None = None, body: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.request = request
        self.body = body


class APIConnectionError(APIError):
    """The server could not be reached (or the connection broke)."""

    def __init__(self, message: str = "Connection error.", *, request: httpx.Request | None = None) -> None:
        super().__init__(message, request=request)


class APITimeoutError(APIConnectionError):
    def __init__(self, request: httpx.Request | None = None) -> None:
        super().__init__("Request timed out.", request=request)


class APIStatusError(APIError):
    """The server answered with an error status; ``detail`` holds the parsed validation items if any."""

    status_code: int = 0

    def __init__(self, message: str, *, response: httpx.Response, body: Any) -> None:
        super().__init__(message, request=response.request, body=body)
        self.response = response
        self.status_code = response.status_code
        self.detail: list[ValidationErrorItem] = _detail_items(body)


# A 4xx says what was wrong with the request: one line in IPython. A 5xx keeps its traceback.
class BadRequestError(OneLine, APIStatusError):
    pass


class AuthenticationError(OneLine, APIStatusError):
    pass


class PermissionDeniedError(OneLine, APIStatusError):
    pass


class NotFoundError(OneLine, APIStatusError):
    pass


class ConflictError(OneLine, APIStatusError):
    pass


class RequestTooLargeError(OneLine, APIStatusError):
    pass


class UnprocessableEntityError(OneLine, APIStatusError):
    pass


class RateLimitError(OneLine, APIStatusError):
    pass


class InternalServerError(APIStatusError):
    pass


class ServiceUnavailableError(InternalServerError):
    pass


class StreamError(APIError):
    """An error event inside a stream that had already started (HTTP 200)."""


class UnsupportedOperation(OneLine, APIError):
    """The deployment lacks this operation (a local-server extension such as model listing); the
    message names it and what to use instead."""


_BY_STATUS: dict[int, type[APIStatusError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    413: RequestTooLargeError,
    422: UnprocessableEntityError,
    429: RateLimitError,
    503: ServiceUnavailableError,
}


def _detail_items(body: Any) -> list[ValidationErrorItem]:
    if isinstance(body, dict) and isinstance(body.get("detail"), list):
        items = []
        for item in body["detail"]:
            try:
                items.append(ValidationErrorItem.model_validate(item))
            except ValueError:
                continue
        return items
    return []


def error_message(body: Any, fallback: str) -> str:
    """The human text of any of the three services' error bodies."""
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(error, str):
            return error
        detail = body.get("detail")
        if isinstance(detail, str):
            return detail
        if isinstance(detail, list) and detail:
            return "; ".join(
                f"{'.'.join(str(p) for p in d.get('loc', []))}: {d.get('msg')}"
                for d in detail
                if isinstance(d, dict)
            )
        if body.get("reason"):
            return str(body["reason"])
    return fallback


def status_error(response: httpx.Response, body: Any) -> APIStatusError:
    cls = _BY_STATUS.get(response.status_code)
    if cls is None:
        cls = InternalServerError if response.status_code >= 500 else APIStatusError
    message = error_message(body, response.reason_phrase or f"HTTP {response.status_code}")
    return cls(f"Error code: {response.status_code} - {message}", response=response, body=body)
