"""Tools for the agent loop: plain Python functions (sync or async) described by a JSON schema.

The schema comes from the function's signature and docstring, as ``transformers.utils.get_json_schema``
does it (the peer convention), without needing transformers: the name, the docstring's first paragraph
as the description, each parameter's type hint (anything pydantic understands: ``str``, ``int``,
``list[str]``, ``Literal[...]``, enums, optionals, pydantic models) and its description from a
Google-style ``Args:`` section (or reST ``:param x:``)::

    def get(key: str) -> str:
        \"\"\"The code stored under a key.

        Args:
            key: three lowercase letters
        \"\"\"

The same parameter model validates the arguments the model sends before the function runs.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic_core import to_jsonable_python

from ..types.training import Tool, ToolFunction

NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # OpenAI's rule for function names
_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Returns?|Raises|Yields|Examples?|Notes?):\s*$")
_ARG = re.compile(r"^\s*(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_PARAM = re.compile(r"^\s*:param\s+(?:[\w\[\], |]+\s+)?(\w+):\s*(.*)$")


class ToolArgumentsError(ValueError):
    """The arguments of a tool call are not JSON, not an object, or do not fit the tool's parameters."""


def _docstring(fn: Callable[..., Any]) -> tuple[str | None, dict[str, str]]:
    """The description (first paragraph) and the per-parameter descriptions of a docstring."""
    lines = (inspect.getdoc(fn) or "").splitlines()
    summary: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION.match(line) or _PARAM.match(line):
            break
        summary.append(line.strip())
    params: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    arg_indent: int | None = None
    for line in lines:
        text, indent = line.strip(), len(line) - len(line.lstrip())
        if header := _SECTION.match(line):
            section, current, arg_indent = header[1], None, None
        elif param := _PARAM.match(line):
            current, params[param[1]] = param[1], param[2].strip()
        elif not text:
            section, current = None, None  # a blank line ends a section and a description
        elif (
            section in ("Args", "Arguments", "Parameters")
            and (arg := _ARG.match(line))
            and (arg_indent is None or indent <= arg_indent)
        ):
            arg_indent, current, params[arg[1]] = indent, arg[1], arg[2].strip()
        elif current is not None:
            params[current] = f"{params[current]} {text}".strip()
    return (" ".join(summary) or None), {k: v for k, v in params.items() if v}


def _clean(schema: Any, defs: dict[str, Any], seen: tuple[str, ...] = ()) -> Any:
    """``schema`` without pydantic's titles, with ``$defs`` references inlined (not recursive ones)."""
    if isinstance(schema, list):
        return [_clean(s, defs, seen) for s in schema]
    if not isinstance(schema, dict):
        return schema
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        name = ref.removeprefix("#/$defs/")
        if name in seen or name not in defs:
            raise TypeError(f"a recursive type ({name}) cannot be described as a tool parameter")
        siblings = {k: v for k, v in schema.items() if k != "$ref"}
        return {**_clean(defs[name], defs, (*seen, name)), **_clean(siblings, defs, seen)}
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("title", "$defs"):
            continue
        if key in ("properties", "patternProperties"):
            out[key] = {name: _clean(sub, defs, seen) for name, sub in value.items()}
        else:
            out[key] = _clean(value, defs, seen)
    return out


@dataclass(frozen=True)
class FunctionTool:
    """A Python function the model can call: its wire description (:attr:`spec`) and how to run it."""

    fn: Callable[..., Any]
    name: str
    description: str | None
    parameters: dict[str, Any]
    arguments_model: type[BaseModel]

    @property
    def spec(self) -> Tool:
        """The ``{"type": "function", "function": {name, description, parameters}}`` a request sends."""
        return Tool(
            function=ToolFunction(name=self.name, description=self.description, parameters=self.parameters)
        )

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)

    def parse(self, arguments: str | dict[str, Any]) -> dict[str, Any]:
        """The keyword arguments of a call (a JSON string, or a dict), validated and converted to the
        parameter types; :class:`ToolArgumentsError` says what is wrong."""
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments or "{}")
            except json.JSONDecodeError as exc:
                raise ToolArgumentsError(f"the arguments are not valid JSON ({exc.msg})") from None
        if not isinstance(arguments, dict):
            raise ToolArgumentsError("the arguments must be a JSON object")
        try:
            parsed = self.arguments_model.model_validate(arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in exc.errors()
            )
            raise ToolArgumentsError(f"invalid arguments: {problems}") from None
        return {name: getattr(parsed, name) for name in type(parsed).model_fields}

    def __call__(self, **kwargs: Any) -> Any:
        return self.fn(**kwargs)


def tool(
    fn: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None
) -> Any:
    """A :class:`FunctionTool` of ``fn`` (also a decorator, with or without ``name``/``description``).

    Every parameter needs a type hint; ``*args``, ``**kwargs`` and positional-only parameters cannot be
    sent by a model and are refused.
    """

    def make(f: Callable[..., Any]) -> FunctionTool:
        if isinstance(f, FunctionTool):
            return f
        tool_name: str = name or str(getattr(f, "__name__", ""))
        if not NAME.match(tool_name):
            raise ValueError(f"tool name {tool_name!r} must be 1-64 letters, digits, '_' or '-'")
        summary, docs = _docstring(f)
        try:
            hints = get_type_hints(f, include_extras=True)
        except (NameError, TypeError) as exc:
            raise TypeError(f"tool {tool_name}: cannot resolve its type hints ({exc})") from None
        fields: dict[str, Any] = {}
        for param in inspect.signature(f).parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
                raise TypeError(f"tool {tool_name}: parameter {param.name} must be passable by keyword")
            if param.name not in hints:
                raise TypeError(f"tool {tool_name}: parameter {param.name} has no type hint")
            default = ... if param.default is param.empty else param.default
            fields[param.name] = (hints[param.name], Field(default, description=docs.get(param.name)))
        model = create_model(f"{tool_name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
        raw = model.model_json_schema()
        schema = _clean(raw, raw.get("$defs", {}))
        schema.pop("additionalProperties", None)  # extra keys are refused anyway; keep prompts short
        parameters = {"type": "object", "properties": {}, **schema}
        return FunctionTool(f, tool_name, description or summary, parameters, model)

    return make(fn) if fn is not None else make


def tool_content(value: Any) -> str:
    """What a tool message carries: a string as it is, anything else as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    return json.dumps(to_jsonable_python(value, fallback=repr), ensure_ascii=False)
