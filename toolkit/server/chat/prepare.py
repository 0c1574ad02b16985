"""A checked request turned into an engine request (:func:`prepare`): checks in vLLM's order, the
weights, the prompt rendered with the chat template and tokenized, the generation settings."""

from __future__ import annotations

import hashlib
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any

from ..._version import __version__
from ...types.chat import ChatCompletionRequest
from ..engine.engine import Engine
from ..engine.request import BeamParams, Request
from ..engine.structured import ConstraintError, GuidedRow, regex_for
from ..engine.template import TemplateError, render_chat
from ..store.usage import ChatUsage
from ..store.users import User
from .checks import engine_checks, parse_request
from .context import ChatContext
from .errors import EngineRejected, invalid
from .model_names import resolve_model
from .sampling_options import constraint, logits_processors, sampling_params
from .tools import (
    ToolUse,
    call_constraint,
    call_form,
    check_template_renders_tools,
    template_messages,
    template_tools,
    tool_use,
)


@dataclass
class Prepared:
    """A checked request, ready for the engine, and what its response needs."""

    req: ChatCompletionRequest
    job: Request
    engine: Engine  # the engine of the base model that serves it
    model: str
    id: str
    created: int
    role: str
    echo: str | None
    fingerprint: str
    user: User
    project: str  # the team/project its usage is recorded under
    tools: ToolUse | None  # how tool calls are read from the output; None: not at all


def prepare(
    chat: ChatContext, user: User, body: Any, project: str | None, stream: bool | None = None
) -> Prepared:
    """Check a request in vLLM's order and turn it into an engine request (blocking: run in a thread).

    ``project`` is the ``OpenAI-Project`` header: usage is recorded under it, and it chooses among
    models of the same name; ``stream`` overrides the body's ``stream``."""
    r = parse_request(body)
    if stream is not None and bool(r.stream) != stream:
        r.stream = stream
    engine, weights, _ = resolve_model(chat, user, r.model, project)
    if r.priority != 0 and not engine.priority_scheduling:
        raise invalid(f"Got priority {r.priority} but Priority scheduling is not enabled.", "priority")
    tools = tool_use(r)
    if tools is not None and tools.choice != "auto" and r.use_beam_search:
        raise invalid("Beam search cannot be constrained to tool calls.", "tool_choice")
    if r.mm_processor_kwargs:
        raise invalid(
            "Per-request mm_processor_kwargs are disabled by default: the served model takes text only.",
            "mm_processor_kwargs",
        )
    name = r.model or engine.spec.name
    template, rendered = _render(chat, engine, r, name, tools)
    prompt = engine.codec.encode(rendered, add_special_tokens=r.add_special_tokens)
    max_len = engine.spec.max_model_len
    if r.truncate_prompt_tokens is not None:
        if r.truncate_prompt_tokens > max_len:
            raise invalid(
                f"truncate_prompt_tokens={r.truncate_prompt_tokens} cannot be greater than max_model_len = "
                f"{max_len}. Please request a smaller truncation size."
            )
        keep = max_len - 1 if r.truncate_prompt_tokens == -1 else r.truncate_prompt_tokens
        if keep > 0:
            prompt = prompt[-keep:]
    if not prompt:
        raise invalid("The decoder prompt cannot be empty")
    if len(prompt) > max_len:
        raise invalid(
            f"This model's maximum context length is {max_len} tokens. However, your prompt contains "
            f"{len(prompt)} input tokens, which exceeds this limit even without any output tokens. Please "
            "reduce the length of the input prompt.",
            "input_tokens",
            len(prompt),
        )
    requested = r.max_completion_tokens if r.max_completion_tokens is not None else r.max_tokens
    if requested is not None and requested > max_len:
        field = "max_completion_tokens" if r.max_completion_tokens is not None else "max_tokens"
        raise invalid(
            f"max_tokens={requested} cannot be greater than max_model_len={max_len}. Please request fewer "
            "output tokens.",
            field,
            requested,
        )
    defaults = engine.spec.generation_defaults
    if requested is None:
        requested = defaults.get("max_tokens")
    max_tokens = min(max_len - len(prompt), requested if requested is not None else max_len)
    n = 1 if r.n is None else r.n
    params = sampling_params(r, max_tokens, n, defaults)
    params.logits_processors = logits_processors(r, engine.vocab_size)
    structured = constraint(r)
    prompt_logprobs = r.prompt_logprobs
    if r.echo and prompt_logprobs is None and r.logprobs and not r.stream:
        prompt_logprobs = r.top_logprobs or 0
    if r.logprobs:
        params.logprobs = r.top_logprobs or 0
    params.bad_words_ids = engine_checks(engine, r, params)
    guides: list[GuidedRow | None] = [None] * n
    if tools is not None and tools.choice != "auto" and r.tools:
        first, then = call_constraint(
            call_form(template), r.tools, tools, r.parallel_tool_calls is not False, engine.compiler
        )
        guides = [engine.compiler.row(first, then) for _ in range(n)]
    elif structured is not None:
        kind, value, whitespace = structured
        try:
            index = engine.compiler.index(regex_for(kind, value, whitespace))
        except ConstraintError as exc:
            raise EngineRejected(str(exc), param="structured_outputs") from None
        guides = [engine.compiler.row(index) for _ in range(n)]
    per_choice = [
        params if i == 0 else replace(params, seed=None if params.seed is None else params.seed + i)
        for i in range(n)
    ]
    request_id = r.request_id or uuid.uuid4().hex[:16]
    last_role = str(r.messages[-1].get("role", "assistant")) if r.messages else "assistant"
    role = "assistant" if r.add_generation_prompt else last_role
    echo = None
    if r.echo and r.messages and r.messages[-1].get("role") == role:
        content = r.messages[-1].get("content")
        echo = (
            content
            if isinstance(content, str)
            else "\n".join(p.get("text", "") for p in content or [] if isinstance(p, dict))
        )
    job = Request(
        id=request_id,
        weights=weights,
        prompt_ids=prompt,
        params=per_choice,
        guides=guides,
        stream=bool(r.stream),
        priority=r.priority,
        cache_scope=f"{user.id}|{r.cache_salt or ''}",
        prompt_logprobs=prompt_logprobs,
        beam=BeamParams(n, r.length_penalty) if r.use_beam_search else None,
    )
    return Prepared(
        req=r,
        job=job,
        engine=engine,
        model=name,
        id=f"chatcmpl-{request_id}",
        created=int(time.time()),
        role=role,
        echo=echo,
        fingerprint=f"toolkit-{__version__}-{hashlib.sha256(engine.spec.name.encode()).hexdigest()[:8]}",
        user=user,
        project=ChatUsage.project_of(user, project),
        tools=tools,
    )


def _render(
    chat: ChatContext, engine: Engine, r: ChatCompletionRequest, model: str, tools: ToolUse | None
) -> tuple[str, str]:
    """``(template, prompt)``: the served model's chat template (or a trusted request's own) and the
    prompt it renders in the sandbox. When calls are to be read, the template must show the tools."""
    kwargs = dict(r.chat_template_kwargs or {})
    requested = r.chat_template or kwargs.pop("chat_template", None)
    if requested and not chat.trust_request_chat_template:
        raise invalid(
            "Chat template is passed with request, but --trust-request-chat-template is not set. "
            "Refused request with untrusted chat template."
        )
    for reserved in ("messages", "add_generation_prompt", "continue_final_message", "tools", "documents"):
        kwargs.pop(reserved, None)
    if r.reasoning_effort is not None:
        kwargs.setdefault("reasoning_effort", r.reasoning_effort)
    template = requested or engine.spec.chat_template
    messages = template_messages(r.messages)

    def render(with_tools: bool) -> str:
        return render_chat(
            template,
            messages,
            add_generation_prompt=r.add_generation_prompt,
            continue_final_message=r.continue_final_message,
            tools=template_tools(r) if with_tools else None,
            documents=r.documents,
            **kwargs,
        )

    try:
        prompt = render(True)
        if tools is not None:
            check_template_renders_tools(prompt, render(False), model)
    except (TemplateError, TypeError, ValueError) as exc:
        raise invalid(str(exc)) from None
    return template, prompt
