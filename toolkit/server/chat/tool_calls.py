"""Tool calls read back from generated text, in the Hermes/Qwen form vLLM's ``hermes`` parser reads:
``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` blocks (the last one may be unclosed).

:func:`parse_tool_calls` reads a whole completion as vLLM does: ``content`` is the text before the
first block (``None`` when empty), and any block that is not a JSON object with a string ``name``
and an ``arguments`` key leaves the whole text as content, with no calls. Arguments are re-encoded
with ``json.dumps(ensure_ascii=False)``.

:class:`ToolCallStream` turns the same text, as it is generated, into stream deltas: content before
the first block (a possible partial ``<tool_call>`` tag held back), then for each call a first delta
with ``id``, ``type`` and ``function.name`` and ``arguments`` fragments that concatenate to the
string :func:`parse_tool_calls` gives (each complete JSON token re-encoded as it arrives).
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from ...types.chat import DeltaFunctionCall, DeltaToolCall
from ...types.training import ToolCall, ToolCallFunction

TOOL_CALL_PARSERS = ("hermes",)
"""The ``--tool-call-parser`` names this module reads, as vLLM names them."""
OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)
_HEADER = re.compile(r'\s*\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"arguments"\s*:\s*')


def tool_call_id() -> str:
    """A new call id in vLLM's form: ``chatcmpl-tool-`` and 16 hex digits."""
    return f"chatcmpl-tool-{uuid.uuid4().hex[:16]}"


def read_call(block: str) -> tuple[str, str] | None:
    """``(name, arguments)`` of one block's text, or ``None`` when it is not a valid call."""
    try:
        call = json.loads(block.strip())
    except ValueError:
        return None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str) or "arguments" not in call:
        return None
    return call["name"], json.dumps(call["arguments"], ensure_ascii=False)


def parse_tool_calls(text: str) -> tuple[str | None, list[ToolCall]]:
    """``(content, calls)`` of a completion; no calls (and all the text as content) unless every
    block is a valid call."""
    if OPEN not in text:
        return text, []
    calls = []
    for match in _BLOCK.finditer(text):
        call = read_call(match[1] if match[1] is not None else match[2])
        if call is None:
            return text, []
        calls.append(ToolCall(id=tool_call_id(), function=ToolCallFunction(name=call[0], arguments=call[1])))
    content = text[: text.index(OPEN)]
    return content or None, calls


_LITERALS = ("true", "false", "null", "NaN", "Infinity", "-Infinity")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_NUMBER_CHARS = frozenset("0123456789.eE+-")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)


@dataclass
class CanonicalJson:
    """Re-encodes one JSON value as it streams in, the way ``json.dumps(json.loads(value),
    ensure_ascii=False)`` writes it (``", "`` and ``": "`` separators), one complete token at a time."""

    pending: str = ""
    depth: int = 0
    done: bool = False
    failed: bool = False

    def feed(self, text: str) -> str:
        """The re-encoded text of the tokens that ``text`` completes."""
        self.pending += text
        out: list[str] = []
        while not (self.done or self.failed):
            rest = self.pending.lstrip()
            self.pending = rest
            if not rest:
                break
            piece, used = self._token(rest)
            if used == 0:
                break
            out.append(piece)
            self.pending = rest[used:]
            if piece in "{[":
                self.depth += 1
            elif piece in "}]":
                self.depth -= 1
            if self.depth == 0 and piece not in (", ", ": "):
                self.done = True
        return "".join(out)

    def _token(self, rest: str) -> tuple[str, int]:
        """``(re-encoded token, characters used)``; 0 used while the token is incomplete."""
        first = rest[0]
        if first in "{}[]":
            return first, 1
        if first in ",:":
            return first + " ", 1
        if first == '"':
            match = _STRING.match(rest)
            if match is None:
                return "", 0
            return self._dump(match[0]), match.end()
        for literal in _LITERALS:
            if rest.startswith(literal):
                return literal, len(literal)
            if literal.startswith(rest):
                return "", 0
        match = _NUMBER.match(rest)
        if match is None:
            self.failed = True
            return "", 0
        if match.end() == len(rest) or rest[match.end()] in _NUMBER_CHARS:  # the number may go on
            return "", 0
        return self._dump(match[0]), match.end()

    def _dump(self, token: str) -> str:
        try:
            return json.dumps(json.loads(token), ensure_ascii=False)
        except ValueError:
            self.failed = True
            return ""


@dataclass
class _Call:
    index: int
    text: str = ""
    name: str | None = None  # set once the first delta went out
    sent: str = ""  # arguments sent so far
    args: CanonicalJson = field(default_factory=CanonicalJson)
    args_start: int = 0


class ToolCallStream:
    """One choice's generated text turned into content and tool-call deltas as it arrives."""

    def __init__(self) -> None:
        self.text = ""  # everything pushed so far
        self.content_sent = 0  # characters of ``text`` sent as content
        self.calls: list[_Call] = []
        self.scan = 0  # where to look for the next block once inside the calls
        self.current: _Call | None = None

    def push(self, delta: str, final: bool = False) -> tuple[str, list[DeltaToolCall]]:
        """Content and tool-call deltas for newly generated text; ``final`` once generation ended
        (nothing is held back then, and if no call went out the rest of the text is content, as in
        the whole response)."""
        self.text += delta
        content = ""
        if not self.calls:
            start = self.text.find(OPEN, self.content_sent)
            if start < 0:
                upto = len(self.text) if final else len(self.text) - _partial_tag(self.text)
                content = self.text[self.content_sent : upto]
                self.content_sent = max(self.content_sent, upto)
                return content, []
            content = self.text[self.content_sent : start]
            self.content_sent = self.scan = start
        deltas = self._calls(final)
        if final and not any(call.name is not None for call in self.calls):
            content += self.text[self.content_sent :]
            self.content_sent = len(self.text)
        return content, deltas

    def _calls(self, final: bool) -> list[DeltaToolCall]:
        out: dict[int, DeltaToolCall] = {}
        while True:
            if self.current is None:
                start = self.text.find(OPEN, self.scan)
                if start < 0:
                    break
                self.current = _Call(index=len(self.calls))
                self.calls.append(self.current)
                self.scan = start + len(OPEN)
            call = self.current
            end = self.text.find(CLOSE, self.scan)
            call.text = self.text[self.scan : end if end >= 0 else len(self.text)]
            if end < 0 and not final:
                self._advance(call, out)
                break
            self._complete(call, out)  # a block seen whole goes out only if it is a valid call
            if end < 0:
                break
            self.current = None
            self.scan = end + len(CLOSE)
        return [out[i] for i in sorted(out)]

    def _advance(self, call: _Call, out: dict[int, DeltaToolCall]) -> None:
        """Send the call's name once its header is complete, then its arguments as they complete."""
        if call.name is None:
            header = _HEADER.match(call.text)
            try:
                call.name = json.loads(header[1]) if header else None
            except ValueError:
                call.name = None
            if header is None or call.name is None:
                return
            call.args_start = header.end()
            _merge(out, call.index, id=tool_call_id(), type="function", name=call.name)
        fragment = call.args.feed(call.text[call.args_start :])
        call.args_start = len(call.text)
        if fragment:
            call.sent += fragment
            _merge(out, call.index, arguments=fragment)

    def _complete(self, call: _Call, out: dict[int, DeltaToolCall]) -> None:
        """A block ended: send what its arguments still lack (all of it if the name came late)."""
        parsed = read_call(call.text)
        if parsed is None:
            return
        name, arguments = parsed
        if call.name is None:
            call.name = name
            _merge(out, call.index, id=tool_call_id(), type="function", name=name)
        if arguments.startswith(call.sent) and len(arguments) > len(call.sent):
            _merge(out, call.index, arguments=arguments[len(call.sent) :])
            call.sent = arguments


def _merge(out: dict[int, DeltaToolCall], index: int, **fields: Any) -> None:
    """Add to the chunk's delta of call ``index`` (one delta per call per chunk: the SDK's
    accumulator would take two deltas of one call in one chunk for two calls)."""
    delta = out.setdefault(index, DeltaToolCall(index=index))
    if "id" in fields:
        delta.id, delta.type = fields["id"], fields["type"]
        delta.function = DeltaFunctionCall(name=fields["name"])
    if "arguments" in fields:
        if delta.function is None:
            delta.function = DeltaFunctionCall(arguments=fields["arguments"])
        else:
            delta.function.arguments = (delta.function.arguments or "") + fields["arguments"]


def _partial_tag(text: str) -> int:
    """Length of the longest end of ``text`` that could begin ``<tool_call>``."""
    for size in range(min(len(OPEN) - 1, len(text)), 0, -1):
        if OPEN.startswith(text[-size:]):
            return size
    return 0
