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
    OneLine,
    PermissionDeniedError,
    RateLimitError,
    RequestTooLargeError,
    ServiceUnavailableError,
    StreamError,
    UnprocessableEntityError,
    UnsupportedOperation,
)
from ._pagination import AsyncCursorPage, AsyncPaginator, CursorPage
from .client import AsyncClient, Client
from .connect import connect, connect_async
from .deployment import Deployment
from .jobs import DuplicateTrainingJob, TrainingJobFailed, TrainingJobInterrupted, TrainingJobWarning
from .local_server import MissingServerExtra, ServerNotStarted

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
    "Deployment",
    "DuplicateTrainingJob",
    "InternalServerError",
    "MissingServerExtra",
    "NotFoundError",
    "OneLine",
    "PermissionDeniedError",
    "RateLimitError",
    "RequestTooLargeError",
    "ServerNotStarted",
    "ServiceUnavailableError",
    "StreamError",
    "TrainingJobFailed",
    "TrainingJobInterrupted",
    "TrainingJobWarning",
    "UnprocessableEntityError",
    "UnsupportedOperation",
    "connect",
    "connect_async",
]
