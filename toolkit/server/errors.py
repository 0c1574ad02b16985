"""Errors raised by the server and the bodies each service answers them with.

- training API: FastAPI's shapes, ``{"detail": "..."}`` and 422 ``{"detail": [{loc, msg, type}]}``;
- chat endpoint (``/v1/chat``, ``/v1/models``): vLLM's ``{"error": {message, type, param, code}}``,
  validation failures 400;
- trace service (``/traces``): Weave's ``{"reason": ...}``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("toolkit.server")

CHAT_PREFIXES = ("/v1/chat/", "/v1/models")
TRACE_PREFIX = "/traces"


class ApiError(Exception):
    """An error with an HTTP status; ``detail`` is a message or a FastAPI-style list."""

    status = 400
    error_type = "BadRequestError"

    def __init__(self, detail: str | list[dict[str, Any]], *, param: str | None = None, **extra: Any):
        super().__init__(detail if isinstance(detail, str) else str(detail))
        self.detail = detail
        self.param = param
        self.extra = extra


class BadRequest(ApiError):
    status = 400


class Unauthorized(ApiError):
    status = 401
    error_type = "AuthenticationError"


class Forbidden(ApiError):
    status = 403
    error_type = "PermissionDeniedError"


class NotFound(ApiError):
    status = 404
    error_type = "NotFoundError"


class Conflict(ApiError):
    status = 409
    error_type = "ConflictError"


class PayloadTooLarge(ApiError):
    status = 413
    error_type = "RequestTooLarge"


class Unprocessable(ApiError):
    status = 422
    error_type = "UnprocessableEntityError"

    def __init__(self, loc: Sequence[str | int], msg: str, type_: str = "value_error") -> None:
        super().__init__([{"loc": list(loc), "msg": msg, "type": type_}])


class Unavailable(ApiError):
    status = 503
    error_type = "ServiceUnavailableError"


def service_of(path: str) -> str:
    if path.startswith(TRACE_PREFIX):
        return "traces"
    if path.startswith(CHAT_PREFIXES):
        return "chat"
    return "training"


def error_response(
    path: str,
    status: int,
    message: Any,
    *,
    param: str | None = None,
    error_type: str | None = None,
    extra: dict[str, Any] | None = None,
) -> JSONResponse:
    """The body of an error of ``status`` in the shape of the service that owns ``path``."""
    service = service_of(path)
    if service == "chat":
        text = message if isinstance(message, str) else str(message)
        body: dict[str, Any] = {
            "error": {
                "message": text,
                "type": error_type or HTTPStatus(status).phrase,
                "param": param,
                "code": status,
            }
        }
    elif service == "traces":
        body = {"reason": message if isinstance(message, str) else str(message), **(extra or {})}
    else:
        body = {"detail": message}
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(body, status_code=status, headers=headers)


def _validation_message(errors: Sequence[dict[str, Any]]) -> str:
    """vLLM's text for pydantic failures: ``"N validation error(s):\\n  {err}..."``."""
    shown = []
    for err in errors[:10]:
        item = {k: v for k, v in err.items() if k in ("type", "loc", "msg", "input", "ctx")}
        item["loc"] = ".".join(str(p) for p in err.get("loc", ()))
        if "input" in item:
            item["input"] = _summarise(item["input"])
        shown.append("  " + str(item)[:1000])
    head = f"{len(errors)} validation error{'s' if len(errors) != 1 else ''}:"
    more = [f"  ...and {len(errors) - 10} more errors"] if len(errors) > 10 else []
    return "\n".join([head, *shown, *more])


def _summarise(value: Any) -> Any:
    if isinstance(value, str):
        return value if len(value) <= 200 else value[:200] + "...[truncated]"
    if isinstance(value, list):
        return f"<list of {len(value)} items>"
    if isinstance(value, dict):
        return f"<dict of {len(value)} items>"
    return str(value) if isinstance(value, int) and abs(value) > 2**53 else value


def install_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(
            request.url.path,
            exc.status,
            exc.detail,
            param=exc.param,
            error_type=exc.error_type,
            extra=exc.extra,
        )

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        path = request.url.path
        if service_of(path) == "chat":
            param = ".".join(str(p) for p in errors[0].get("loc", ())) if errors else None
            return error_response(
                path, 400, _validation_message(errors), param=param, error_type="Bad Request"
            )
        detail = [
            {
                "loc": [str(p) if not isinstance(p, int) else p for p in e.get("loc", ())],
                "msg": e.get("msg", ""),
                "type": e.get("type", "value_error"),
            }
            for e in errors
        ]
        if service_of(path) == "traces":
            return JSONResponse({"reason": _validation_message(errors), "detail": detail}, status_code=422)
        return JSONResponse({"detail": detail}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(request.url.path, exc.status_code, exc.detail)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s", request.url.path)
        return error_response(
            request.url.path, 500, "Internal server error", error_type="InternalServerError"
        )
