"""The tools of a chat request: how its calls are produced and read (:class:`ToolUse`), its history
made ready for the template (:func:`template_messages`), and, for ``required`` and named choices,
the constraint that makes the model write calls (:func:`call_constraint`).

The constraint is a regular expression over the text the model writes, in the form its own chat
template renders calls (:func:`call_form`), so the constrained tokens are the ones the model would
write by itself: ``<tool_call>{"name": "N", "arguments": {...}}</tool_call>`` blocks for the
built-in template, ``<tool_call>\\n{...}\\n</tool_call>`` ones for Qwen's.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from outlines_core import Index

from ...types.chat import ChatCompletionRequest, ChatTool
from ..engine.structured import Compiler, CompileTimeout, ConstraintError, regex_for
from ..engine.template import TemplateError, render_chat
from .errors import invalid

NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}
SCALAR: dict[str, Any] = {"type": ["string", "number", "boolean", "null"]}
FLAT_OBJECT: dict[str, Any] = {"type": "object", "additionalProperties": SCALAR}
"""What an object without ``properties`` may hold under a constraint: a flat object of scalars (an
unrestricted object is not a regular language, and its approximations take tens of seconds to
compile)."""
_SUBSCHEMA_KEYS = ("type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "properties", "items")


@dataclass(frozen=True)
class ToolUse:
    """How a request's calls come about: ``auto`` (free generation, then parsing), ``required`` (one
    or more calls) or the named function ``name`` (one call); the last two are constrained."""

    choice: str
    name: str | None = None

    def finish_reason(self, reason: str, called: bool) -> str:
        """vLLM's: a choice that called tools and stopped ends ``tool_calls``, except under a named
        choice (``stop``)."""
        return "tool_calls" if called and reason == "stop" and self.name is None else reason


def tool_use(r: ChatCompletionRequest) -> ToolUse | None:
    """The request's tool use; ``None`` when no calls are read (no tools, or ``tool_choice: none``)."""
    choice = r.tool_choice if r.tool_choice is not None else ("auto" if r.tools else "none")
    if not r.tools or choice == "none":
        return None
    if isinstance(choice, str):
        return ToolUse(choice)
    return ToolUse("function", choice.function.name)


def template_tools(r: ChatCompletionRequest) -> list[dict[str, Any]] | None:
    """The tools as the template sees them (plain dicts, unset fields left out)."""
    return [t.model_dump(mode="json", exclude_none=True) for t in r.tools] if r.tools else None


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history for the template: assistant ``tool_calls`` arguments, JSON strings on the wire,
    become objects (empty when missing), as vLLM hands them to Hugging Face templates."""
    out = []
    for i, message in enumerate(messages):
        calls = message.get("tool_calls")
        if message.get("role") != "assistant" or not calls:
            out.append(message)
            continue
        if not isinstance(calls, list):
            raise invalid(f"messages[{i}].tool_calls must be a list of tool calls.", "messages")
        parsed = []
        for j, call in enumerate(calls):
            where = f"messages[{i}].tool_calls[{j}]"
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                raise invalid(
                    f"{where} must be {{'type': 'function', 'function': {{name, arguments}}}}.", "messages"
                )
            arguments = function.get("arguments")
            if isinstance(arguments, str) and arguments.strip():
                try:
                    arguments = json.loads(arguments)
                except ValueError as exc:
                    raise invalid(
                        f"{where}.function.arguments is not valid JSON: {exc}", "messages"
                    ) from None
            elif not isinstance(arguments, dict | list):
                arguments = {}
            parsed.append({**call, "function": {**function, "arguments": arguments}})
        out.append({**message, "tool_calls": parsed})
    return out


def check_template_renders_tools(with_tools: str, without_tools: str, model: str) -> None:
    """A 400 naming ``model`` when its template shows nothing of the tools (it cannot call them)."""
    if with_tools == without_tools:
        raise invalid(
            f"The chat template of model `{model}` does not render `tools`, so the model cannot call "
            'them: serve a model whose template supports tools, or send `tool_choice: "none"`.',
            "tools",
        )


@dataclass(frozen=True)
class CallForm:
    """How a template writes a call: ``open`` + ``{"name": N, "arguments": A}`` (``", "``/``": "``
    separators when ``spaced``, else none) + ``close``; consecutive calls joined by ``separator``."""

    open: str = "<tool_call>\n"
    close: str = "\n</tool_call>"
    separator: str = "\n"
    spaced: bool = True

    def head(self, name: str) -> str:
        """The call's text up to its arguments."""
        quoted = json.dumps(name, ensure_ascii=False)
        return f'{{"name": {quoted}, "arguments": ' if self.spaced else f'{{"name":{quoted},"arguments":'


DEFAULT_FORM = CallForm()
"""Qwen's form, for templates that render tools but not past calls as ``<tool_call>`` blocks."""
_PROBE_ARGS = {"x": 1}


@lru_cache(maxsize=32)
def call_form(template: str) -> CallForm:
    """The form ``template`` renders assistant calls in, read from a conversation it renders."""

    def render(names: list[str]) -> str:
        """The assistant turn's text: what the conversation renders after the user's message (the
        system turn before it may show ``<tool_call>`` in its instructions)."""
        calls = [
            {"id": f"call_{n}", "type": "function", "function": {"name": n, "arguments": _PROBE_ARGS}}
            for n in names
        ]
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": "?"},
            {"role": "assistant", "content": None, "tool_calls": calls},
        ]
        tools = [
            {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in names
        ]
        before, whole = (
            render_chat(template, m, add_generation_prompt=False, continue_final_message=False, tools=tools)
            for m in (messages[:1], messages)
        )
        return whole.removeprefix(before)

    try:
        one, two = render(["probe_a"]), render(["probe_a", "probe_b"])
    except (TemplateError, TypeError, ValueError, LookupError, AttributeError):
        return DEFAULT_FORM  # a template that cannot render this conversation
    start = one.find("<tool_call>")
    end = one.find("</tool_call>", start)
    if start < 0 or end < 0:
        return DEFAULT_FORM
    inner = one[start + len("<tool_call>") : end]
    body = inner.strip()
    lead, trail = inner[: len(inner) - len(inner.lstrip())], inner[len(inner.rstrip()) :]
    spaced = CallForm(spaced=True).head("probe_a") + json.dumps(_PROBE_ARGS) + "}"
    compact = CallForm(spaced=False).head("probe_a") + json.dumps(_PROBE_ARGS, separators=(",", ":")) + "}"
    if body not in (spaced, compact):
        return DEFAULT_FORM
    first_end = two.find("</tool_call>") + len("</tool_call>")
    second = two.find("<tool_call>", first_end)
    separator = two[first_end:second] if second >= 0 else DEFAULT_FORM.separator
    return CallForm(f"<tool_call>{lead}", f"{trail}</tool_call>", separator, body == spaced)


def bounded(schema: Any, top: bool = True) -> Any:
    """``schema`` as outlines-core can enforce it in reasonable time: an object without
    ``properties`` becomes a flat object of scalars, an array without ``items`` an array of scalars,
    a schema-less value a scalar (at the top, a flat object: arguments are an object), and an integer
    range of at most :data:`MAX_INTEGER_RANGE` values an ``enum`` (outlines-core ignores ``minimum``
    and ``maximum``)."""
    if isinstance(schema, list):
        return [bounded(s, False) for s in schema]
    if not isinstance(schema, dict):
        return schema
    kind = schema.get("type")
    if not any(k in schema for k in _SUBSCHEMA_KEYS):
        return FLAT_OBJECT if top else SCALAR
    if kind == "object" and "properties" not in schema and schema.get("additionalProperties", True) is True:
        return {**schema, **FLAT_OBJECT}
    if kind == "integer" and "enum" not in schema:
        span = _integer_range(schema)
        if span is not None:
            return {**{k: v for k, v in schema.items() if k not in _RANGE_KEYS}, "enum": span}
    out = dict(schema)
    if kind == "array" and "items" not in schema and "prefixItems" not in schema:
        out["items"] = SCALAR
    for key in ("items", "prefixItems", "additionalProperties", "anyOf", "oneOf", "allOf"):
        if isinstance(out.get(key), dict | list):
            out[key] = bounded(out[key], False)
    for key in ("properties", "$defs", "definitions"):
        if isinstance(out.get(key), dict):
            out[key] = {name: bounded(sub, False) for name, sub in out[key].items()}
    return out


MAX_INTEGER_RANGE = 1000
_RANGE_KEYS = ("type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def _integer_range(schema: dict[str, Any]) -> list[int] | None:
    """The values of a bounded integer schema's range, if it has at most ``MAX_INTEGER_RANGE``."""
    low, high = schema.get("minimum"), schema.get("maximum")
    if isinstance(schema.get("exclusiveMinimum"), int | float):
        low = math.floor(schema["exclusiveMinimum"]) + 1
    if isinstance(schema.get("exclusiveMaximum"), int | float):
        high = math.ceil(schema["exclusiveMaximum"]) - 1
    if not isinstance(low, int | float) or not isinstance(high, int | float):
        return None
    first, last = math.ceil(low), math.floor(high)
    return list(range(first, last + 1)) if 0 < last - first + 1 <= MAX_INTEGER_RANGE else None


_META = set("\\.+*?()|[]{}^$#&-~")


def literal(text: str) -> str:
    """``text`` as a regular expression matching exactly it."""
    return "".join(
        "\\n" if c == "\n" else "\\t" if c == "\t" else "\\" + c if c in _META else c for c in text
    )


def call_constraint(
    form: CallForm,
    tools: list[ChatTool],
    use: ToolUse,
    parallel: bool,
    compiler: Compiler,
) -> tuple[Index, Index | None]:
    """The compiled constraint of a ``required`` (one or more calls; one unless ``parallel``) or
    named (one call) choice, as ``(one call, what may follow a call)``; a 400 naming the tools whose
    schema does not compile."""
    chosen = [t for t in tools if use.name is None or t.function.name == use.name]
    options = []
    for tool in chosen:
        schema = tool.function.parameters if tool.function.parameters is not None else NO_PARAMETERS
        try:
            arguments = regex_for("json", bounded(schema))
        except ConstraintError as exc:
            raise _not_compiled([tool], exc) from None
        options.append(literal(form.head(tool.function.name)) + f"({arguments})")
    one = literal(form.open) + "(" + "|".join(options) + ")" + literal("}" + form.close)
    try:
        more = parallel and use.name is None
        return compiler.index(one), compiler.index(literal(form.separator) + one) if more else None
    except CompileTimeout as exc:
        raise _not_compiled(chosen, exc) from None
    except ConstraintError as exc:
        culprits = [t for t in chosen if not _compiles(form, t, compiler)]
        raise _not_compiled(culprits or chosen, exc) from None


def _compiles(form: CallForm, tool: ChatTool, compiler: Compiler) -> bool:
    schema = tool.function.parameters if tool.function.parameters is not None else NO_PARAMETERS
    try:
        compiler.index(literal(form.head(tool.function.name)) + regex_for("json", bounded(schema)))
    except ConstraintError:
        return False
    return True


def _not_compiled(tools: list[ChatTool], exc: Exception) -> Exception:
    names = ", ".join(f"`{t.function.name}`" for t in tools)
    what = "tool" if len(tools) == 1 else "tools"
    return invalid(
        f"The parameters schema of {what} {names} cannot be compiled into a tool-call constraint: {exc}",
        "tools",
    )
