"""A chat completion as one response (``stream: false``): vLLM's ``chat.completion`` object."""

from __future__ import annotations

import asyncio
from typing import Any

from ...types.chat import AssistantMessage, ChatCompletion, ChatCompletionChoice
from ...types.training import ChoiceLogprobs
from ..engine.engine import Engine
from ..engine.events import Finished, Started
from ..store.users import User
from .context import ChatContext
from .forwarding import forward_completion
from .generation import generate
from .logprobs import LogprobFormatter
from .prepare import prepare
from .tool_calls import parse_tool_calls
from .usage import record_usage, usage_of


async def create_chat_completion(
    chat: ChatContext, user: User, body: dict[str, Any], project: str | None = None
) -> ChatCompletion:
    """Create a chat completion (the whole response at once); ``project`` is the ``OpenAI-Project``
    header (``team/project``). Request errors raise :class:`~..errors.ApiError`."""
    if chat.external is not None:
        return await forward_completion(chat, chat.external, user, body, project)
    prep = await asyncio.to_thread(prepare, chat, user, body, project, False)
    engine: Engine = prep.engine
    fmt = LogprobFormatter(engine.codec, bool(prep.req.return_tokens_as_token_ids))
    started: Started | None = None
    finished: dict[int, Finished] = {}
    async for event in generate(chat, prep):
        if isinstance(event, Started):
            started = event
        elif isinstance(event, Finished):
            finished[event.index] = event
    assert started is not None
    r, prompt = prep.req, prep.job.prompt_ids
    choices = []
    for index in sorted(finished):
        f = finished[index]
        logprobs = (
            ChoiceLogprobs(content=fmt.entries(f.token_ids, f.logprobs, []))
            if f.logprobs is not None
            else None
        )
        message = AssistantMessage(role=prep.role, content=(prep.echo or "") + f.text)
        finish_reason = f.finish_reason
        if prep.tools is not None:
            content, calls = parse_tool_calls(f.text)
            if calls:
                message.content = (prep.echo or "") + (content or "") or None
                message.tool_calls = calls
            finish_reason = prep.tools.finish_reason(f.finish_reason, bool(calls))
        choices.append(
            ChatCompletionChoice(
                index=index,
                message=message,
                logprobs=logprobs,
                finish_reason=finish_reason,
                stop_reason=f.stop_reason,
                token_ids=f.token_ids if r.return_token_ids else None,
            )
        )
    completion = sum(len(f.token_ids) for f in finished.values())
    await asyncio.to_thread(record_usage, chat, prep, len(prompt), completion, started.cached_tokens)
    return ChatCompletion(
        id=prep.id,
        created=prep.created,
        model=prep.model,
        choices=choices,
        system_fingerprint=prep.fingerprint,
        usage=usage_of(len(prompt), completion, started.cached_tokens),
        prompt_logprobs=fmt.prompt_logprobs(started.prompt_logprobs)
        if started.prompt_logprobs is not None
        else None,
        prompt_token_ids=prompt if r.return_token_ids else None,
    )
