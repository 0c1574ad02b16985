"""``Client`` and ``AsyncClient``: one object per deployment, with the same surface."""

from __future__ import annotations

from types import TracebackType
from typing import Any

from ..types.chat import ModelCardList
from ..types.training import Health, SystemCheck
from ._transport import AsyncTransport, Config, Op, SyncTransport
from .inference import AsyncChat, Chat, op_served_models
from .traces import AsyncTraces, Traces
from .training import (
    Artifacts,
    AsyncArtifacts,
    AsyncModels,
    AsyncSFTTrainingJobs,
    AsyncTrainingJobs,
    Models,
    SFTTrainingJobs,
    TrainingJobs,
)


def _config(
    base_url: str,
    api_key: str | None,
    inference_url: str | None,
    trace_url: str | None,
    project: str | None,
    timeout: float,
    max_retries: int,
) -> Config:
    base = base_url.rstrip("/")
    return Config(
        base_url=base,
        api_key=api_key,
        inference_url=(inference_url or f"{base}/v1").rstrip("/"),
        trace_url=(trace_url or f"{base}/traces").rstrip("/"),
        project=project,
        timeout=timeout,
        max_retries=max_retries,
    )


def op_health() -> Op[Health]:
    return Op("GET", "/v1/health", Health.model_validate)


def op_system_check() -> Op[SystemCheck]:
    return Op("GET", "/v1/system-check", SystemCheck.model_validate)


class Client:
    """Synchronous client of the training API, the chat endpoint and the trace service.

    ``base_url`` serves the training API (``/v1/preview/...``); ``inference_url`` defaults to
    ``<base_url>/v1`` and ``trace_url`` to ``<base_url>/traces``. ``project`` (``team/project``) is
    sent as the ``OpenAI-Project`` header on inference calls. Use :func:`toolkit.connect` to build
    one from the environment or the local server.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        inference_url: str | None = None,
        trace_url: str | None = None,
        project: str | None = None,
        timeout: float = 600.0,
        max_retries: int = 2,
    ) -> None:
        self.config = _config(base_url, api_key, inference_url, trace_url, project, timeout, max_retries)
        self._transport = SyncTransport(self.config)
        t = self._transport
        self.models = Models(t)
        self.training_jobs = TrainingJobs(t)
        self.sft_training_jobs = SFTTrainingJobs(t)
        self.artifacts = Artifacts(t)
        self.chat = Chat(t)
        self.traces = Traces(t)

    def health(self) -> Health:
        return self._transport.run(op_health())

    def system_check(self) -> SystemCheck:
        return self._transport.run(op_system_check())

    def served_models(self) -> ModelCardList:
        """``GET {inference_url}/models``: every model name the chat endpoint accepts."""
        return self._transport.run(op_served_models())

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client(base_url={self.config.base_url!r})"


class AsyncClient:
    """The asynchronous twin of :class:`Client` (same attributes, awaitable methods)."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        inference_url: str | None = None,
        trace_url: str | None = None,
        project: str | None = None,
        timeout: float = 600.0,
        max_retries: int = 2,
    ) -> None:
        self.config = _config(base_url, api_key, inference_url, trace_url, project, timeout, max_retries)
        self._transport = AsyncTransport(self.config)
        t = self._transport
        self.models = AsyncModels(t)
        self.training_jobs = AsyncTrainingJobs(t)
        self.sft_training_jobs = AsyncSFTTrainingJobs(t)
        self.artifacts = AsyncArtifacts(t)
        self.chat = AsyncChat(t)
        self.traces = AsyncTraces(t)

    async def health(self) -> Health:
        return await self._transport.run(op_health())

    async def system_check(self) -> SystemCheck:
        return await self._transport.run(op_system_check())

    async def served_models(self) -> ModelCardList:
        return await self._transport.run(op_served_models())

    async def close(self) -> None:
        await self._transport.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncClient(base_url={self.config.base_url!r})"
