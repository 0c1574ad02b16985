"""How widgets show a conversation: messages, and tool calls and tool results collapsed to one line
(open them for the pretty-printed JSON). The call's icon is Font Awesome's wrench, as on the widgets'
buttons (an emoji draws as an empty box where no emoji font is installed, e.g. Debian's Chromium)."""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from typing import Any

from .. import _theme
from .._text import visible

STEP = f"border-left:3px solid {_theme.BORDER};padding-left:4px;margin:2px 0"
TOOL_ICON = '<i class="fa fa-wrench" aria-hidden="true"></i>'
PREVIEW = 60


def _preview(text: str) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= PREVIEW else one_line[: PREVIEW - 1] + "…"


def _pretty(text: str) -> str:
    """JSON pretty-printed (a string that is not JSON as it is)."""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except (json.JSONDecodeError, TypeError):
        return text


def tool_call_html(name: str, arguments: str) -> str:
    """A tool call, collapsed to one line (wrench icon, ``name {args}``); open it for the pretty JSON
    arguments."""
    return (
        f'<details class="tool-call" style="{STEP}"><summary>{TOOL_ICON} <b>{html.escape(name)}</b> '
        f"<code>{html.escape(_preview(arguments))}</code></summary>"
        f'<pre style="margin:0">{html.escape(_pretty(arguments))}</pre></details>'
    )


def tool_result_html(content: str, name: str | None = None) -> str:
    """A tool result, collapsed to one line (``↩ name: result``); open it for the whole (JSON) result."""
    label = f"<b>{html.escape(name)}</b>: " if name else ""
    content = visible(content)
    return (
        f'<details class="tool-result" style="{STEP}"><summary>↩ {label}'
        f"<code>{html.escape(_preview(content))}</code></summary>"
        f'<pre style="margin:0">{html.escape(_pretty(content))}</pre></details>'
    )


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def message_html(message: Mapping[str, Any]) -> str:
    """One chat message: role and text, its tool calls and a tool result collapsed."""
    role = str(message.get("role"))
    if role == "tool":
        return tool_result_html(_text(message.get("content")), message.get("name"))
    text = visible(_text(message.get("content")))
    shown = text or role != "assistant"  # an assistant turn of calls only shows just the calls
    head = (
        f'<div style="white-space:pre-wrap">{html.escape(role)}: {html.escape(text)}</div>' if shown else ""
    )
    calls = "".join(
        tool_call_html(str(fn.get("name")), _arguments(fn.get("arguments")))
        for fn in (c.get("function") or {} for c in message.get("tool_calls") or [])
    )
    return head + calls


def _arguments(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
