"""Chat completions answered by the external inference server (``toolkit serve --inference-url``).

The local contract stays: the caller was authenticated here; the request is checked here
(:func:`~.checks.parse_request`) and its ``model`` resolved here (:mod:`.model_names`); a LoRA
checkpoint is loaded into the server if it is not yet; the body goes there with ``model`` replaced by
the external name, and the answer comes back with the caller's ``model``. Usage is recorded per
team/project as for local generation. Whole-weight checkpoints cannot be served there: a 400. An
adapter the server has forgotten (it restarted) is loaded again and the request retried once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from ...types.chat import ChatCompletion, ChatCompletionChunk
from ..engine.lora import checkpoint_kind
from ..errors import BadRequest
from ..store.usage import ChatUsage
from ..store.users import User
from .checks import parse_request
from .context import ChatContext
from .external import ExternalError, ExternalInference, bad_gateway, error_of
from .model_names import resolve_model

T = TypeVar("T", ChatCompletion, ChatCompletionChunk)
R = TypeVar("R")


@dataclass(frozen=True)
class Target:
    """Where a request goes: the external name, the caller's name, and the adapter folder if any."""

    name: str
    model: str
    adapter: Path | None


async def forward_completion(
    chat: ChatContext, external: ExternalInference, user: User, body: Any, project: str | None
) -> ChatCompletion:
    """The server's completion of ``body`` (``stream`` false), under the caller's ``model``."""
    target = await _target(chat, external, user, body, project)
    sent = {**body, "model": target.name, "stream": False}
    data = await _with_adapter(external, target, lambda: external.complete(sent))
    data["model"] = target.model
    completion = _parse(ChatCompletion, data, external)
    usage = completion.usage
    cached = usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details else 0
    await _record(chat, user, project, target.model, usage.prompt_tokens, usage.completion_tokens, cached)
    return completion


async def forward_stream(
    chat: ChatContext, external: ExternalInference, user: User, body: Any, project: str | None
) -> AsyncGenerator[ChatCompletionChunk]:
    """The server's chunks of ``body``, under the caller's ``model``. The usage chunk is always asked
    for (to record it) and passed on only when the caller asked for it."""
    target = await _target(chat, external, user, body, project)
    options = body.get("stream_options") or {}
    wanted = bool(options.get("include_usage"))
    options = {**options, "include_usage": True}
    sent = {**body, "model": target.name, "stream": True, "stream_options": options}

    async def opened() -> tuple[dict[str, Any] | None, AsyncGenerator[dict[str, Any]]]:
        events = external.chunks(sent)
        return await anext(events, None), events

    first, rest = await _with_adapter(external, target, opened)
    usage: dict[str, Any] = {}
    async with aclosing(_chain(first, rest)) as events:
        async for data in events:
            if "error" in data:  # an error event after the stream began
                error = data["error"]
                status = error.get("code") if isinstance(error, dict) else None
                raise error_of(status if isinstance(status, int) else 500, data, external.url)
            data["model"] = target.model
            usage = data.get("usage") or usage
            if not wanted:
                if not data.get("choices"):
                    continue  # the usage-only chunk the caller did not ask for
                data.pop("usage", None)
            yield _parse(ChatCompletionChunk, data, external)
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    prompt, completion = usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0
    await _record(chat, user, project, target.model, prompt, completion, cached)


async def _chain(
    first: dict[str, Any] | None, rest: AsyncGenerator[dict[str, Any]]
) -> AsyncGenerator[dict[str, Any]]:
    try:
        if first is not None:
            yield first
            async for data in rest:
                yield data
    finally:
        await rest.aclose()


async def _target(
    chat: ChatContext, external: ExternalInference, user: User, body: Any, project: str | None
) -> Target:
    """Where ``body`` goes; a checkpoint's adapter is loaded there first if need be."""
    sent = parse_request(body).model
    resolved = await asyncio.to_thread(resolve_model, chat, user, sent, project)
    folder = resolved.weights.folder
    if folder is not None:
        if checkpoint_kind(folder) != "lora":
            raise BadRequest(
                f"The model `{sent}` is a full fine-tuning checkpoint (whole weights): the inference "
                f"server at {external.url} serves base models and LoRA adapters only. Train with "
                "LoRA (the model's lora_config), or serve without --inference-url.",
                param="model",
            )
        await external.ensure_adapter(resolved.served_name, folder)
    return Target(resolved.served_name, sent or resolved.served_name, folder)


async def _with_adapter(
    external: ExternalInference, target: Target, attempt: Callable[[], Awaitable[R]]
) -> R:
    """``attempt()``; if the server no longer knows the adapter (a 404: it restarted since it was
    loaded), the adapter is loaded again and ``attempt()`` runs once more."""
    try:
        return await attempt()
    except ExternalError as exc:
        if exc.status != 404 or target.adapter is None:
            raise
    external.forget(target.name)
    await external.ensure_adapter(target.name, target.adapter)
    return await attempt()


def _parse(kind: type[T], data: dict[str, Any], external: ExternalInference) -> T:
    try:
        return kind.model_validate(data)
    except ValidationError as exc:
        raise bad_gateway(external.url, f"answered an invalid {kind.__name__}: {exc}") from None


async def _record(
    chat: ChatContext, user: User, project: str | None, model: str, prompt: int, completion: int, cached: int
) -> None:
    team_project = ChatUsage.project_of(user, project)
    await asyncio.to_thread(chat.usage.record, user, team_project, model, prompt, completion, cached)
