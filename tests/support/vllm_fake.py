"""A fake of vLLM's OpenAI server with runtime LoRA updating, for the ``--inference-url`` tests.

It serves what the local server uses there (vLLM's routes under ``/v1``, its bodies and error
shapes, vllm/entrypoints/openai/serving_models.py): ``/chat/completions`` (JSON and SSE) for its
base model and the adapters loaded into it, ``/load_lora_adapter`` (400 "already been loaded" on a
second load), ``/unload_lora_adapter`` and ``/models``. Each answer names the model it was asked
for, so a test sees which name reached it; ``fail`` makes the next completion answer an error.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

KEY = "vllm-secret"
WORDS = ["hello", " from", " the", " fake"]


def error(status: int, message: str, type_: str, param: str | None = None) -> JSONResponse:
    body = {"error": {"message": message, "type": type_, "param": param, "code": status}}
    return JSONResponse(body, status_code=status)


@dataclass
class FakeVllm:
    base: str  # vLLM's served model name
    adapters: dict[str, str] = field(default_factory=dict)  # name -> path
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (path, JSON body)
    keys: list[str | None] = field(default_factory=list)  # the Authorization header of each request
    fail: Response | None = None  # the next chat completion's answer
    stream_error: bool = False  # the next stream ends with an error event after its first chunk
    url: str = ""

    def chats(self) -> list[dict[str, Any]]:
        return [body for path, body in self.requests if path == "/v1/chat/completions"]

    def loads(self) -> list[dict[str, Any]]:
        return [body for path, body in self.requests if path == "/v1/load_lora_adapter"]

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.middleware("http")
        async def record(request: Request, call_next: Any) -> Response:
            body = await request.body()
            self.requests.append((request.url.path, json.loads(body) if body else {}))
            self.keys.append(request.headers.get("authorization"))
            if request.headers.get("authorization") != f"Bearer {KEY}":
                return JSONResponse({"error": "Unauthorized"}, status_code=401)
            answer: Response = await call_next(request)
            return answer

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Response:
            body = await request.json()
            if self.fail is not None:
                answer, self.fail = self.fail, None
                return answer
            model = body["model"]
            if model != self.base and model not in self.adapters:
                return error(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
            if body.get("stream"):
                return StreamingResponse(self._events(body), media_type="text/event-stream")
            return JSONResponse(
                {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion",
                    "created": 1,
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "".join(WORDS)},
                            "finish_reason": "length",
                            "served_by": "fake",  # a key the toolkit does not know: passed on
                        }
                    ],
                    "usage": {"prompt_tokens": 7, "completion_tokens": 4, "total_tokens": 11},
                }
            )

        @app.post("/v1/load_lora_adapter")
        async def load(request: Request) -> Response:
            body = await request.json()
            name = body["lora_name"]
            if name in self.adapters:
                message = f"The lora adapter '{name}' has already been loaded."
                return error(400, message, "InvalidUserInput")
            self.adapters[name] = body["lora_path"]
            return PlainTextResponse(f"Success: LoRA adapter '{name}' added successfully.")

        @app.post("/v1/unload_lora_adapter")
        async def unload(request: Request) -> Response:
            name = (await request.json())["lora_name"]
            if self.adapters.pop(name, None) is None:
                return error(404, f"The lora adapter '{name}' cannot be found.", "NotFoundError")
            return PlainTextResponse(f"Success: LoRA adapter '{name}' removed successfully.")

        @app.get("/v1/models")
        async def models() -> dict[str, Any]:
            cards = [{"id": self.base, "object": "model", "root": self.base, "parent": None}]
            cards += [
                {"id": n, "object": "model", "root": p, "parent": self.base} for n, p in self.adapters.items()
            ]
            return {"object": "list", "data": cards}

        return app

    async def _events(self, body: dict[str, Any]) -> Any:
        def event(choices: list[dict[str, Any]], **extra: Any) -> str:
            chunk = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1}
            return f"data: {json.dumps({**chunk, 'model': body['model'], 'choices': choices, **extra})}\n\n"

        failing, self.stream_error = self.stream_error, False
        yield event([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None}])
        for i, word in enumerate(WORDS):
            if failing:
                died = {"message": "engine died", "type": "InternalServerError", "param": None, "code": 500}
                yield f"data: {json.dumps({'error': died})}\n\n"
                yield "data: [DONE]\n\n"
                return
            last = i == len(WORDS) - 1
            yield event(
                [{"index": 0, "delta": {"content": word}, "finish_reason": "length" if last else None}]
            )
        if (body.get("stream_options") or {}).get("include_usage"):
            yield event([], usage={"prompt_tokens": 7, "completion_tokens": 4, "total_tokens": 11})
        yield "data: [DONE]\n\n"


@contextmanager
def serve_fake_vllm(base: str) -> Iterator[FakeVllm]:
    """Serve a :class:`FakeVllm` of ``base`` on a free loopback port (its ``url`` ends in ``/v1``)."""
    fake = FakeVllm(base)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(fake.app(), log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the fake vLLM did not start")
        time.sleep(0.01)
    fake.url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    try:
        yield fake
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
