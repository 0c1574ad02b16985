"""Typed HTTP client core: transport, pages, streams and one module per service."""

from ._errors import (
    APIConnectionError,
    APIError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    InternalServerError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
    RequestTooLargeError,
    ServiceUnavailableError,
    StreamError,
    UnprocessableEntityError,
)
from ._pagination import AsyncCursorPage, AsyncPaginator, CursorPage
from .client import AsyncClient, Client
from .connect import connect, connect_async

__all__ = [
    "APIConnectionError",
    "APIError",
    "APIStatusError",
    "APITimeoutError",
    "AsyncClient",
    "AsyncCursorPage",
    "AsyncPaginator",
    "AuthenticationError",
    "BadRequestError",
    "Client",
    "ConflictError",
    "CursorPage",
    "InternalServerError",
    "NotFoundError",
    "PermissionDeniedError",
    "RateLimitError",
    "RequestTooLargeError",
    "ServiceUnavailableError",
    "StreamError",
    "UnprocessableEntityError",
    "connect",
    "connect_async",
]
