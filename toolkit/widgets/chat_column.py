"""What ChatCompare shows of each model: a :class:`Column` (text, tokens, tool calls per sample)
folded from the streamed chunks, and its HTML (plain text, a word diff, or logprob colours)."""

from __future__ import annotations

import difflib
import html
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import _theme
from .._text import visible
from ..plots import probability_color
from ..types.chat import Usage
from ..types.training import TokenLogprob
from .conversation import tool_call_html, tool_result_html

SAMPLE = f"white-space:pre-wrap;border-top:1px dashed {_theme.BORDER};padding:2px"


def diff_html(base: str, other: str) -> str:
    """``other`` marked word by word against ``base``: insertions green, deletions struck red."""
    a, b = re.findall(r"\S+|\s+", base), re.findall(r"\S+|\s+", other)
    out = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            out.append(html.escape("".join(b[j1:j2])))
            continue
        if op in ("delete", "replace"):
            deleted = html.escape("".join(a[i1:i2]))
            out.append(f'<del style="background:{_theme.tint(_theme.ERROR, 30)}">{deleted}</del>')
        if op in ("insert", "replace"):
            out.append(
                f'<ins style="background:{_theme.tint(_theme.SUCCESS, 30)};text-decoration:none">'
                f"{html.escape(''.join(b[j1:j2]))}</ins>"
            )
    return "".join(out)


def logprob_html(tokens: Sequence[TokenLogprob]) -> str:
    """Tokens on the fixed probability scale of :func:`toolkit.plots.probability_color` (red: unlikely,
    green: likely), black text on every colour; the logprob shows on hover."""
    return "".join(
        f'<span title="logprob {t.logprob:.3f}" '
        f'style="background:{probability_color(t.logprob)};color:black">{html.escape(visible(t.token))}</span>'
        for t in tokens
    )


@dataclass
class Step:
    """A finished part of a sample before its last turn: text, a tool call or a tool result."""

    kind: str  # "text" | "call" | "result"
    text: str
    name: str | None = None
    call_id: str | None = None


@dataclass
class Column:
    """What one model answered: per sample the text and tokens of its last turn, the steps before it
    (tool calls and results of earlier turns), the calls streaming in; usage, timing, error."""

    model: str
    texts: dict[int, str] = field(default_factory=dict)
    tokens: dict[int, list[TokenLogprob]] = field(default_factory=dict)
    finish: dict[int, str | None] = field(default_factory=dict)
    steps: dict[int, list[Step]] = field(default_factory=dict)
    calls: dict[int, dict[int, dict[str, str]]] = field(default_factory=dict)
    usage: Usage | None = None
    latency_s: float | None = None
    first_token_s: float | None = None
    error: str | None = None
    done: bool = False

    def num_calls(self, sample: int) -> int:
        """The tool calls sample ``sample`` made, in every turn."""
        return sum(s.kind == "call" for s in self.steps.get(sample, [])) + len(self.calls.get(sample, {}))


def add_chunk(col: Column, chunk: Any, start: float, offset: int = 0) -> None:
    """Fold one streamed chunk into ``col``, its choice ``k`` as sample ``offset + k``."""
    for choice in chunk.choices:
        i = choice.index + offset
        delta = choice.delta
        if col.first_token_s is None and (delta.content or delta.tool_calls):
            col.first_token_s = time.perf_counter() - start
        col.texts[i] = col.texts.get(i, "") + (delta.content or "")
        for call in delta.tool_calls or []:
            _add_call_delta(col.calls.setdefault(i, {}), call)
        if choice.logprobs and choice.logprobs.content:
            col.tokens.setdefault(i, []).extend(choice.logprobs.content)
        if choice.finish_reason:
            col.finish[i] = choice.finish_reason
    col.usage = _add_usage(col.usage, chunk.usage)


def _add_call_delta(calls: dict[int, dict[str, str]], delta: Any) -> None:
    """Join a streamed tool-call delta into the calls of a sample, by ``index`` as OpenAI's SDK does:
    the first delta of a call carries its id and name, later ones fragments of the arguments."""
    d = delta if isinstance(delta, Mapping) else delta.model_dump()
    function = d.get("function") or {}
    call = calls.setdefault(d.get("index") or 0, {"id": "", "name": "", "arguments": ""})
    call["id"] = d.get("id") or call["id"]
    call["name"] += function.get("name") or ""
    call["arguments"] += function.get("arguments") or ""


def _add_usage(total: Usage | None, usage: Usage | None) -> Usage | None:
    """Usage summed over the turns of a run (each streamed request reports its own)."""
    if usage is None or total is None:
        return usage or total
    return Usage(
        prompt_tokens=total.prompt_tokens + usage.prompt_tokens,
        completion_tokens=total.completion_tokens + usage.completion_tokens,
        total_tokens=total.total_tokens + usage.total_tokens,
    )


def column_html(col: Column, base: Column | None, view: str) -> str:
    """One model's column: per sample its earlier steps and its text in ``view`` ("text", "diff"
    against ``base``, "logprobs"), then usage and latency."""
    samples = sorted(set(col.texts) | set(col.steps) | set(col.calls)) or [0]
    body = "".join(
        f'<div class="sample" style="{SAMPLE}">{_steps_html(col, i)}'
        f"{_sample_html(col, i, base, view)}{_calls_html(col, i)}</div>"
        for i in samples
    )
    facts = []
    if col.usage:
        facts.append(f"{col.usage.prompt_tokens} prompt + {col.usage.completion_tokens} completion tokens")
    if col.latency_s is not None:
        facts.append(f"{col.latency_s:.2f} s")
    error = f'<div style="color:{_theme.ERROR}">{html.escape(col.error)}</div>' if col.error else ""
    head = f"<b>{html.escape(col.model)}</b>{'' if col.done else ' …'}"
    return f'<div class="chat-column">{head}{error}{body}<small>{" · ".join(facts)}</small></div>'


def _sample_html(col: Column, i: int, base: Column | None, view: str) -> str:
    text = visible(col.texts.get(i, ""))
    if view == "logprobs" and col.tokens.get(i):
        return logprob_html(col.tokens[i])
    if view == "diff" and base is not None and base is not col and base.done and col.done:
        return diff_html(visible(base.texts.get(i, "")), text)
    return html.escape(text)


def _steps_html(col: Column, i: int) -> str:
    parts = []
    for step in col.steps.get(i, []):
        if step.kind == "call":
            parts.append(tool_call_html(step.name or "", step.text))
        elif step.kind == "result":
            parts.append(tool_result_html(step.text, step.name))
        else:
            parts.append(f"<div>{html.escape(visible(step.text))}</div>")
    return "".join(parts)


def _calls_html(col: Column, i: int) -> str:
    calls = col.calls.get(i, {})
    return "".join(tool_call_html(calls[k]["name"], calls[k]["arguments"]) for k in sorted(calls))
