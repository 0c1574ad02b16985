"""A chat completion as chunks (``stream: true``), in vLLM's sequence: a role chunk per choice (and
the echoed text), content chunks, each choice's final chunk, and the usage chunk if asked for.

When tool calls are read, each chunk's text goes through the choice's :class:`~.tool_calls.ToolCallStream`:
its delta holds the content and tool-call pieces that text completes (``{}`` when it completes
none), and still carries the logprobs and token ids of every token."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from ...types.chat import ChatCompletionChunk, ChunkChoice, DeltaMessage, Usage
from ...types.training import ChoiceLogprobs
from ..engine.engine import Engine
from ..engine.events import Delta, Finished, Started
from ..store.users import User
from .context import ChatContext
from .forwarding import forward_stream
from .generation import generate
from .logprobs import LogprobFormatter
from .prepare import prepare
from .tool_calls import ToolCallStream, parse_tool_calls
from .usage import record_usage, usage_of


async def stream_chat_completion(
    chat: ChatContext, user: User, body: dict[str, Any], project: str | None = None
) -> AsyncIterator[ChatCompletionChunk]:
    """Create a chat completion as chunks. Request errors raise before the first chunk; checks vLLM
    makes in its engine raise :class:`~.errors.EngineRejected` (the route sends an error event)."""
    if chat.external is not None:
        async with aclosing(forward_stream(chat, chat.external, user, body, project)) as forwarded:
            async for item in forwarded:
                yield item
        return
    prep = await asyncio.to_thread(prepare, chat, user, body, project, True)
    r, prompt = prep.req, prep.job.prompt_ids
    engine: Engine = prep.engine
    fmt = LogprobFormatter(engine.codec, bool(r.return_tokens_as_token_ids))
    options = r.stream_options
    include_usage = bool(options and options.include_usage)
    continuous = include_usage and bool(options and options.continuous_usage_stats)
    with_ids = bool(r.return_token_ids)
    counts = [0] * len(prep.job.params)
    seen: list[list[int]] = [[] for _ in prep.job.params]
    parsers = [ToolCallStream() for _ in prep.job.params] if prep.tools is not None else None

    def chunk(choice: ChunkChoice, **extra: Any) -> ChatCompletionChunk:
        if continuous:
            extra["usage"] = Usage(
                prompt_tokens=len(prompt),
                total_tokens=len(prompt) + counts[choice.index],
                completion_tokens=counts[choice.index],
                completion_tokens_details=None,
            )
        return ChatCompletionChunk(
            id=prep.id,
            object="chat.completion.chunk",
            created=prep.created,
            model=prep.model,
            choices=[choice],
            **extra,
        )

    def message(delta: Delta, final: bool) -> DeltaMessage:
        if parsers is None:
            return DeltaMessage(content=delta.text)
        text, calls = parsers[delta.index].push(delta.text, final)
        pieces: dict[str, Any] = {"content": text} if text else {}
        return DeltaMessage(**pieces, tool_calls=calls) if calls else DeltaMessage(**pieces)

    def content(delta: Delta, **final: Any) -> ChatCompletionChunk:
        counts[delta.index] += len(delta.token_ids)
        logprobs = None
        if r.logprobs:
            logprobs = ChoiceLogprobs(content=fmt.entries(delta.token_ids, delta.logprobs, seen[delta.index]))
        seen[delta.index].extend(delta.token_ids)
        choice = ChunkChoice(
            index=delta.index,
            delta=message(delta, bool(final)),
            logprobs=logprobs,
            finish_reason=final.pop("finish_reason", None),
            **final,
            token_ids=delta.token_ids if with_ids else None,
        )
        extra = (
            {} if include_usage or choice.finish_reason is None else {"system_fingerprint": prep.fingerprint}
        )
        return chunk(choice, **extra)

    cached = 0
    async for event in generate(chat, prep):
        if isinstance(event, Started):
            cached = event.cached_tokens
            for index in range(len(prep.job.params)):
                role = ChunkChoice(
                    index=index,
                    delta=DeltaMessage(role=prep.role, content=""),
                    logprobs=None,
                    finish_reason=None,
                )
                yield (
                    chunk(role, prompt_token_ids=prompt if with_ids else None) if index == 0 else chunk(role)
                )
                if prep.echo is not None:
                    yield chunk(
                        ChunkChoice(
                            index=index,
                            delta=DeltaMessage(content=prep.echo),
                            logprobs=None,
                            finish_reason=None,
                        )
                    )
        elif isinstance(event, Delta):
            yield content(event)
        elif isinstance(event, Finished):
            tail = event.tail or Delta(event.index, [], "", [])
            reason = event.finish_reason
            if prep.tools is not None:
                reason = prep.tools.finish_reason(reason, bool(parse_tool_calls(event.text)[1]))
            yield content(tail, finish_reason=reason, stop_reason=event.stop_reason)
    completion = sum(counts)
    await asyncio.to_thread(record_usage, chat, prep, len(prompt), completion, cached)
    if include_usage:
        yield ChatCompletionChunk(
            id=prep.id,
            object="chat.completion.chunk",
            created=prep.created,
            model=prep.model,
            choices=[],
            usage=usage_of(len(prompt), completion, cached),
            system_fingerprint=prep.fingerprint,
        )
