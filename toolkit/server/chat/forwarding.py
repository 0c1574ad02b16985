"""Chat completions answered by the external inference server (``toolkit serve --inference-url``).

The local contract stays: the caller was authenticated here; the request is checked here
(:func:`~.checks.parse_request`) and its ``model`` resolved here (:mod:`.model_names`); a LoRA
checkpoint is loaded into the server if it is not yet; the body goes there with ``model`` replaced by
the external name, and the answer comes back with the caller's ``model``. Usage is recorded per
team/project as for local generation. Whole-weight checkpoints cannot be served there: a 400.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, TypeVar

from pydantic import ValidationError

from ...types.chat import ChatCompletion, ChatCompletionChunk
from ..engine.lora import checkpoint_kind
from ..errors import BadRequest
from ..store.usage import ChatUsage
from ..store.users import User
from .checks import parse_request
from .context import ChatContext
from .external import ExternalInference, bad_gateway, error_of
from .model_names import resolve_model

T = TypeVar("T", ChatCompletion, ChatCompletionChunk)


async def forward_completion(
    chat: ChatContext, external: ExternalInference, user: User, body: Any, project: str | None
) -> ChatCompletion:
    """The server's completion of ``body`` (``stream`` false), under the caller's ``model``."""
    name, model = await _target(chat, external, user, body, project)
    data = await external.complete({**body, "model": name, "stream": False})
    data["model"] = model
    completion = _parse(ChatCompletion, data, external)
    usage = completion.usage
    cached = usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details else 0
    await _record(chat, user, project, model, usage.prompt_tokens, usage.completion_tokens, cached)
    return completion


async def forward_stream(
    chat: ChatContext, external: ExternalInference, user: User, body: Any, project: str | None
) -> AsyncIterator[ChatCompletionChunk]:
    """The server's chunks of ``body``, under the caller's ``model``. The usage chunk is always asked
    for (to record it) and passed on only when the caller asked for it."""
    name, model = await _target(chat, external, user, body, project)
    options = body.get("stream_options") or {}
    wanted = bool(options.get("include_usage"))
    sent = {**body, "model": name, "stream": True, "stream_options": {**options, "include_usage": True}}
    usage: dict[str, Any] = {}
    async for data in external.chunks(sent):
        if "error" in data:  # an error event after the stream began
            error = data["error"]
            status = error.get("code") if isinstance(error, dict) else None
            raise error_of(status if isinstance(status, int) else 500, data, external.url)
        data["model"] = model
        usage = data.get("usage") or usage
        if not wanted:
            if not data.get("choices"):
                continue  # the usage-only chunk the caller did not ask for
            data.pop("usage", None)
        yield _parse(ChatCompletionChunk, data, external)
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    prompt, completion = usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0
    await _record(chat, user, project, model, prompt, completion, cached)


async def _target(
    chat: ChatContext, external: ExternalInference, user: User, body: Any, project: str | None
) -> tuple[str, str]:
    """``(external name, the caller's model name)``; the checkpoint's adapter is loaded there."""
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
    return resolved.served_name, sent or resolved.served_name


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
