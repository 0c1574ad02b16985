"""``Client`` and ``AsyncClient``: one object per deployment, with the same surface."""

from __future__ import annotations

from types import TracebackType
from typing import Any

from ..types.chat import ModelCardList
from ..types.service import Health, SystemCheck
from ._transport import AsyncTransport, Config, Op, SyncTransport
from .deployment import Deployment, DeploymentName
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


def op_health() -> Op[Health]:
    return Op("GET", "/v1/health", Health.model_validate)


def op_system_check() -> Op[SystemCheck]:
    return Op("GET", "/v1/system-check", SystemCheck.model_validate)


class _Deployment:
    """What both clients share: one deployment's three service roots, key and options.

    ``base_url`` serves the training API (``/v1/preview/...``); ``inference_url`` defaults to
    ``<base_url>/v1`` and ``trace_url`` to ``<base_url>/traces``. ``project`` (``team/project``) is
    sent as the ``OpenAI-Project`` header on inference calls. ``deployment`` (``"local"``,
    ``"wandb"`` or ``"custom"``; by default told from the URL) decides whether the toolkit's
    extension endpoints are expected: see :attr:`deployment`. Use :func:`toolkit.connect` to build
    a client from the environment or the local server.
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
        deployment: DeploymentName | None = None,
    ) -> None:
        base = base_url.rstrip("/")
        self.config = Config(
            base_url=base,
            api_key=api_key,
            inference_url=(inference_url or f"{base}/v1").rstrip("/"),
            trace_url=(trace_url or f"{base}/traces").rstrip("/"),
            deployment=Deployment(deployment, base) if deployment else Deployment.for_url(base),
            project=project,
            timeout=timeout,
            max_retries=max_retries,
        )
        self._open()

    def _open(self) -> None:
        raise NotImplementedError

    @property
    def deployment(self) -> Deployment:
        """``.name`` (``"local"``, ``"wandb"``, ``"custom"``) and ``.extensions``: whether the
        toolkit's extension endpoints (model listing, artifacts, job cancel, ...) are served; where
        they are not, those operations raise :class:`~toolkit.client.UnsupportedOperation`."""
        return self.config.deployment

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"{name}(base_url={self.config.base_url!r}, deployment={self.deployment.name!r})"


class Client(_Deployment):
    """Synchronous client of the training API, the chat endpoint and the trace service."""

    def _open(self) -> None:
        self._transport = t = SyncTransport(self.config)
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


class AsyncClient(_Deployment):
    """The asynchronous twin of :class:`Client` (same attributes, awaitable methods)."""

    def _open(self) -> None:
        self._transport = t = AsyncTransport(self.config)
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
