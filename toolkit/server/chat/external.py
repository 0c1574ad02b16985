"""An external OpenAI-compatible inference server (vLLM with ``--enable-lora``) that generates instead
of the local engines: ``toolkit serve --inference-url URL [--inference-api-key KEY]``.

``URL`` is the server's OpenAI base URL (``http://gpu-host:8000/v1``): completions go to
``URL/chat/completions``, LoRA checkpoints are loaded with vLLM's runtime adapter API
(``POST URL/load_lora_adapter {"lora_name", "lora_path"}``, which needs
``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` there) under :func:`checkpoint_name`, and unloaded
(``POST URL/unload_lora_adapter {"lora_name"}``) when their checkpoint or model is deleted. Its errors keep
their status and message in the chat endpoint's shape; a failure to reach it is a 502 naming ``URL``.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import AsyncGenerator, Iterable
from http import HTTPStatus
from pathlib import Path
from typing import Any

import httpx

from ..engine.lora import checkpoint_kind
from ..errors import ApiError

log = logging.getLogger("toolkit.server")
CONNECT_TIMEOUT = 10.0
READ_TIMEOUT = 600.0  # a long completion on a busy server
LOAD_TIMEOUT = 120.0  # vLLM reads the adapter's weights before it answers


class InferenceUrlError(ValueError):
    """``--inference-url`` is not an http(s) URL."""


def inference_url(value: str) -> str:
    """``value`` checked and without its trailing ``/`` (``http://host:8000/v1``)."""
    try:
        url = httpx.URL(value.strip())
    except httpx.InvalidURL:
        url = httpx.URL("")
    if url.scheme not in ("http", "https") or not url.host:
        raise InferenceUrlError(
            f"--inference-url {value!r}: expected the server's OpenAI base URL, http(s)://HOST[:PORT]/v1"
        )
    return str(url).rstrip("/")


def checkpoint_name(model_id: str, step: int) -> str:
    """``<model_id>:step<N>``: a checkpoint's adapter name on the external server. Model ids are
    unique and the latest step is never deleted, so a name never comes back for other weights."""
    return f"{model_id}:step{step}"


class ExternalError(ApiError):
    """An error answer of the external server, or a failure to reach it, as the chat endpoint answers."""

    def __init__(self, status: int, message: str, error_type: str, param: str | None = None) -> None:
        super().__init__(message, param=param)
        self.status = status
        self.error_type = error_type


def error_of(status: int, body: Any, url: str) -> ExternalError:
    """The error in an answer's body: vLLM's ``{"error": {message, type, param, code}}`` (or its older
    flat ``{"object": "error", ...}``) keeps its status and message. The external server refusing
    *our* key (401/403) is a 502: the caller's own key was fine."""
    detail = body.get("error") if isinstance(body, dict) and isinstance(body.get("error"), dict) else body
    message = detail.get("message") if isinstance(detail, dict) else None
    if not isinstance(message, str):
        message = f"answered {status}: {str(body)[:500]}"
    if status in (401, 403):
        return bad_gateway(url, f"refused the key (--inference-api-key): {message}")
    error_type = detail.get("type") if isinstance(detail, dict) else None
    param = detail.get("param") if isinstance(detail, dict) else None
    return ExternalError(
        status,
        message,
        error_type if isinstance(error_type, str) else HTTPStatus(status).phrase,
        param if isinstance(param, str) else None,
    )


def bad_gateway(url: str, what: str) -> ExternalError:
    """A 502 saying what went wrong with the server at ``url``."""
    return ExternalError(502, f"The inference server at {url} {what}", "BadGateway")


def _answer_error(response: httpx.Response, url: str) -> ExternalError:
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    return error_of(response.status_code, body, url)


class ExternalInference:
    """The external server: chat completions, and the LoRA adapters loaded into it (by name)."""

    def __init__(self, url: str, api_key: str | None = None) -> None:
        self.url = inference_url(url)
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(
            headers=self._headers, timeout=httpx.Timeout(READ_TIMEOUT, connect=CONNECT_TIMEOUT)
        )
        self._loaded: set[str] = set()  # adapter names known to be loaded there
        self._lock = threading.Lock()

    def unreachable(self, exc: Exception) -> ExternalError:
        what = "did not answer in time" if isinstance(exc, httpx.TimeoutException) else "cannot be reached"
        return bad_gateway(self.url, f"{what}: {type(exc).__name__}: {exc}".rstrip(": "))

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """The server's ``chat.completion`` for ``body`` (``stream`` false)."""
        try:
            response = await self._http.post(f"{self.url}/chat/completions", json=body)
        except httpx.HTTPError as exc:
            raise self.unreachable(exc) from None
        if response.status_code != 200:
            raise _answer_error(response, self.url)
        try:
            data = response.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise bad_gateway(self.url, "answered no JSON object")
        return data

    async def chunks(self, body: dict[str, Any]) -> AsyncGenerator[dict[str, Any]]:
        """The data of each Server-Sent Event of a streamed completion, until ``[DONE]``; a refusal
        raises before the first. Closing the iterator closes the connection (the server cancels)."""
        try:
            async with self._http.stream("POST", f"{self.url}/chat/completions", json=body) as response:
                if response.status_code != 200:
                    await response.aread()
                    raise _answer_error(response, self.url)
                async for line in response.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        return
                    yield json.loads(data)
        except httpx.HTTPError as exc:
            raise self.unreachable(exc) from None

    async def ensure_adapter(self, name: str, folder: Path) -> None:
        """Load adapter ``folder`` under ``name`` unless it is known to be loaded already."""
        if name in self._loaded:
            return
        try:
            response = await self._http.post(
                f"{self.url}/load_lora_adapter", json=self._load_body(name, folder), timeout=LOAD_TIMEOUT
            )
        except httpx.HTTPError as exc:
            raise self.unreachable(exc) from None
        self._loaded_or_raise(name, response)

    def forget(self, name: str) -> None:
        """``name`` is no longer loaded there (the server restarted)."""
        with self._lock:
            self._loaded.discard(name)

    def load_checkpoint(self, model_id: str, step: int, folder: Path) -> None:
        """The training runner's hook when a job wrote a checkpoint (on the job worker thread): a LoRA
        adapter is loaded at once. A failure is logged only: the first request for it loads it again."""
        if checkpoint_kind(folder) != "lora":
            return
        name = checkpoint_name(model_id, step)
        try:
            timeout = httpx.Timeout(LOAD_TIMEOUT, connect=CONNECT_TIMEOUT)
            with httpx.Client(headers=self._headers, timeout=timeout) as http:
                response = http.post(f"{self.url}/load_lora_adapter", json=self._load_body(name, folder))
            self._loaded_or_raise(name, response)
        except (httpx.HTTPError, ExternalError) as exc:
            log.warning("adapter %s not loaded into %s (its first request retries): %s", name, self.url, exc)

    def unload(self, model_id: str, steps: Iterable[int] | None) -> None:
        """The deleted checkpoints' adapters (``steps``; None: every one loaded of the model) are
        unloaded there, freeing its memory. Not loaded there (404) is fine; a failure is logged only:
        the checkpoints are gone either way."""
        prefix = checkpoint_name(model_id, 0).removesuffix("0")
        with self._lock:
            names = (
                [checkpoint_name(model_id, s) for s in steps]
                if steps is not None
                else [n for n in self._loaded if n.startswith(prefix)]
            )
            self._loaded.difference_update(names)
        timeout = httpx.Timeout(LOAD_TIMEOUT, connect=CONNECT_TIMEOUT)
        with httpx.Client(headers=self._headers, timeout=timeout) as http:
            for name in names:
                try:
                    response = http.post(f"{self.url}/unload_lora_adapter", json={"lora_name": name})
                except httpx.HTTPError as exc:
                    log.warning("adapter %s not unloaded from %s: %s", name, self.url, exc)
                    continue
                if response.status_code not in (200, 404):
                    log.warning("adapter %s not unloaded from %s: %s", name, self.url, response.text[:200])

    def _loaded_or_raise(self, name: str, response: httpx.Response) -> None:
        """200, or vLLM's 400 "The lora adapter '<name>' has already been loaded.": loaded."""
        if response.status_code == 200 or (
            response.status_code == 400 and "already been loaded" in response.text
        ):
            with self._lock:
                self._loaded.add(name)
            return
        error = _answer_error(response, self.url)
        message = f"Loading the adapter `{name}` into the inference server at {self.url} failed: "
        message += str(error.detail)
        raise ExternalError(error.status, message, error.error_type, error.param)

    @staticmethod
    def _load_body(name: str, folder: Path) -> dict[str, str]:
        return {"lora_name": name, "lora_path": str(folder.resolve())}

    async def aclose(self) -> None:
        await self._http.aclose()
