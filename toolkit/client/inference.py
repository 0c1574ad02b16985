"""Chat completion resource (``client.chat.completions``) over the vLLM/OpenAI wire format."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, Literal, overload

from .. import seeding
from ..types.chat import ChatCompletion, ChatCompletionChunk, ModelCardList, UsageReport
from ._observe import aobserve, observe
from ._transport import AsyncTransport, Op, SyncTransport
from .deployment import Extension

CHAT_USAGE = Extension("chat usage report")


def op_chat(
    messages: Sequence[Mapping[str, Any]], model: str | None, params: dict[str, Any], stream: bool
) -> Op[Any]:
    body = {
        "messages": [dict(m) for m in messages],
        "model": model,
        **{k: v for k, v in params.items() if v is not None},
    }
    if body.get("seed") is None and (seed := seeding.request_seed()) is not None:
        body["seed"] = seed  # the n-th request of a seeded rollout
    if stream:
        body["stream"] = True
        return Op(
            "POST",
            "/chat/completions",
            ChatCompletionChunk.model_validate,
            service="inference",
            json=body,
            stream="sse",
        )
    return Op(
        "POST",
        "/chat/completions",
        ChatCompletion.model_validate,
        service="inference",
        json=body,
        link="chat",
    )


def op_served_models() -> Op[ModelCardList]:
    return Op("GET", "/models", ModelCardList.model_validate, service="inference")


def op_usage(project: str | None) -> Op[UsageReport]:
    return Op(
        "GET",
        "/usage",
        UsageReport.model_validate,
        service="inference",
        params={"project": project},
        extension=CHAT_USAGE,
    )


class Completions:
    def __init__(self, t: SyncTransport) -> None:
        self._t = t

    @overload
    def create(
        self,
        *,
        messages: Sequence[Mapping[str, Any]],
        model: str | None = ...,
        stream: Literal[False] = ...,
        **params: Any,
    ) -> ChatCompletion: ...

    @overload
    def create(
        self,
        *,
        messages: Sequence[Mapping[str, Any]],
        model: str | None = ...,
        stream: Literal[True],
        **params: Any,
    ) -> Iterator[ChatCompletionChunk]: ...

    def create(
        self,
        *,
        messages: Sequence[Mapping[str, Any]],
        model: str | None = None,
        stream: bool = False,
        **params: Any,
    ) -> ChatCompletion | Iterator[ChatCompletionChunk]:
        """Create a chat completion; with ``stream=True`` an iterator of typed chunks.

        Every request field of the vLLM chat API is a keyword (``temperature``, ``logprobs``,
        ``return_token_ids``, ``structured_outputs``, ...). ``completion.trainable_choice(i)`` turns a
        choice into the :class:`~toolkit.types.training.Choice` a trajectory carries. Inside a seeded
        rollout (``gather(..., seed=s)``) a request without ``seed`` gets the rollout's next one
        (:mod:`toolkit.seeding`).
        """
        op = op_chat(messages, model, params, stream)
        return self._t.stream(op) if stream else observe(op.json, lambda: self._t.run(op))


class Chat:
    def __init__(self, t: SyncTransport) -> None:
        self._t = t
        self.completions = Completions(t)

    def usage(self, project: str | None = None) -> UsageReport:
        """Chat usage per team/project and model (``GET {inference_url}/usage``, a local-server extension)."""
        return self._t.run(op_usage(project))


class AsyncCompletions:
    def __init__(self, t: AsyncTransport) -> None:
        self._t = t

    @overload
    async def create(
        self,
        *,
        messages: Sequence[Mapping[str, Any]],
        model: str | None = ...,
        stream: Literal[False] = ...,
        **params: Any,
    ) -> ChatCompletion: ...

    @overload
    async def create(
        self,
        *,
        messages: Sequence[Mapping[str, Any]],
        model: str | None = ...,
        stream: Literal[True],
        **params: Any,
    ) -> AsyncIterator[ChatCompletionChunk]: ...

    async def create(
        self,
        *,
        messages: Sequence[Mapping[str, Any]],
        model: str | None = None,
        stream: bool = False,
        **params: Any,
    ) -> ChatCompletion | AsyncIterator[ChatCompletionChunk]:
        op = op_chat(messages, model, params, stream)
        if stream:
            return self._t.stream(op)
        return await aobserve(op.json, self._t.run(op))


class AsyncChat:
    def __init__(self, t: AsyncTransport) -> None:
        self._t = t
        self.completions = AsyncCompletions(t)

    async def usage(self, project: str | None = None) -> UsageReport:
        return await self._t.run(op_usage(project))
