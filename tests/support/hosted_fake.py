"""A fake of the hosted W&B Training API for tests: an ASGI app in front of a real local server.

It forwards every request to the local server, except where the hosted API differs as its
documentation shows (docs.wandb.ai/api-reference): the local-server extensions are absent (404 Not
Found, or 405 Method Not Allowed where the path exists there for another method, as FastAPI
answers), ``/log`` answers an empty body, and a job's record is only ``{"id"}``.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn

MODEL = r"/v1/preview/models/[^/]+"
JOB = r"/v1/preview/training-jobs/[^/]+"
# (method, path pattern, status) of every extension route: what the hosted API answers there
ABSENT = [
    ("GET", r"/v1/preview/models", 405),
    ("GET", MODEL, 405),
    ("GET", rf"{MODEL}/trajectories", 404),
    ("GET", rf"{MODEL}/checkpoints/[^/]+/files(/[^/]+)?", 404),
    ("GET", r"/v1/preview/artifacts", 404),
    ("POST", r"/v1/preview/artifacts", 404),
    ("GET", r"/v1/preview/training-jobs", 405),
    ("POST", rf"{JOB}/cancel", 404),
    ("GET", r"/v1/usage", 404),
]
REASON = {404: "Not Found", 405: "Method Not Allowed"}
HOP_BY_HOP = {"connection", "content-length", "transfer-encoding", "keep-alive"}


class HostedFake:
    """The ASGI app; ``requests`` lists every ``(method, path)`` that reached it."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.requests: list[tuple[str, str]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        method, path = scope["method"], scope["path"]
        self.requests.append((method, path))
        for absent_method, pattern, status in ABSENT:
            if method == absent_method and re.fullmatch(pattern, path):
                await self._reply(send, status, [(b"content-type", b"application/json")], _detail(status))
                return
        status, headers, body = await self._forward(scope, receive)
        if status == 200 and method == "POST" and re.fullmatch(rf"{MODEL}/log", path):
            headers, body = [], b""
        elif status == 200 and method == "GET" and re.fullmatch(JOB, path):
            body = json.dumps({"id": json.loads(body)["id"]}).encode()
        await self._reply(send, status, headers, body)

    async def _forward(self, scope: dict[str, Any], receive: Any) -> tuple[int, list[Any], bytes]:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [(k, v) for k, v in scope["headers"] if k.decode().lower() != "host"]
        url = (
            self.upstream
            + scope["path"]
            + (f"?{scope['query_string'].decode()}" if scope["query_string"] else "")
        )
        async with httpx.AsyncClient(timeout=600) as client:
            answer = await client.request(scope["method"], url, headers=headers, content=body)
        kept = [(k.encode(), v.encode()) for k, v in answer.headers.items() if k.lower() not in HOP_BY_HOP]
        return answer.status_code, kept, answer.content

    @staticmethod
    async def _reply(send: Any, status: int, headers: list[Any], body: bytes) -> None:
        headers = [*headers, (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _detail(status: int) -> bytes:
    return json.dumps({"detail": REASON[status]}).encode()


@contextmanager
def serve_hosted_fake(upstream: str) -> Iterator[tuple[str, HostedFake]]:
    """Serve a :class:`HostedFake` of ``upstream`` on a free loopback port; yields its URL and app."""
    app = HostedFake(upstream)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the hosted fake did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", app
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
