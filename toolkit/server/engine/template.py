"""Chat templates rendered in jinja2's immutable sandbox (as transformers renders them)."""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from typing import Any

from jinja2 import Template, TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["TemplateError", "check_template", "render_chat"]


def _raise(message: str) -> None:
    raise TemplateError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, **_: Any) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent)


@lru_cache(maxsize=32)
def _compile(source: str) -> Template:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(source)


def check_template(source: str) -> None:
    """A :class:`TemplateError` (with the line) if ``source`` is not a template jinja2 compiles."""
    _compile(source)


def render_chat(
    source: str,
    messages: list[dict[str, Any]],
    *,
    add_generation_prompt: bool,
    continue_final_message: bool,
    tools: list[dict[str, Any]] | None = None,
    documents: list[dict[str, Any]] | None = None,
    **kwargs: Any,
) -> str:
    """The prompt text; with ``continue_final_message`` it ends right after the last message's content."""
    if continue_final_message and add_generation_prompt:
        raise TemplateError(
            "continue_final_message and add_generation_prompt are not compatible. Use "
            "continue_final_message when you want the model to continue the final message, and "
            "add_generation_prompt when you want to add a header that will prompt it to start a new "
            "assistant message instead."
        )
    text = _compile(source).render(
        messages=messages,
        add_generation_prompt=add_generation_prompt,
        tools=tools,
        documents=documents,
        **kwargs,
    )
    if continue_final_message:
        final = messages[-1].get("content") if messages else None
        if isinstance(final, list):
            final = "".join(p.get("text", "") for p in final if isinstance(p, dict))
        if not isinstance(final, str) or not final.strip() or final.strip() not in text:
            raise TemplateError(
                "continue_final_message is set but the final message does not appear in the prompt."
            )
        end = text.rindex(final.strip()) + len(final.strip())
        text = text[:end]
    return text
