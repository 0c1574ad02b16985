"""The request body size limit: a middleware answering 413 in the owning service's error shape."""

from __future__ import annotations

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import error_response


class BodySizeLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await too_large(path, self.max_bytes)(scope, receive, send)
            return
        seen = 0
        started = answered = False

        async def limited() -> Message:
            # Answer 413 here rather than raise: FastAPI turns errors while reading a body into a 400.
            nonlocal seen, answered
            if answered:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    answered = True
                    if not started:
                        await too_large(path, self.max_bytes)(scope, receive, send)
                    return {"type": "http.disconnect"}
            return message

        async def guarded(message: Message) -> None:
            nonlocal started
            if not answered:
                started = True
                await send(message)

        await self.app(scope, limited, guarded)


def too_large(path: str, max_bytes: int) -> Response:
    return error_response(path, 413, f"Request body larger than {max_bytes} bytes")
