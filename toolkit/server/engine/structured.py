"""Structured outputs (json schema, json_object, regex, choice, grammar) enforced with outlines-core.

Every constraint becomes a regular expression, compiled against the vocabulary into an index (with a
time limit, cached); each sequence walks the index with a guide that gives the allowed tokens.
Grammars are EBNF (``name ::= ...``) restricted to their regular subset: no recursive rules.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from threading import Lock
from typing import Any

import torch
from outlines_core import Guide, Index, Vocabulary
from outlines_core.json_schema import build_regex_from_schema
from torch import Tensor

from .codec import Codec

COMPILE_TIMEOUT_S = 10.0
CACHE_SIZE = 64
_SCALAR: dict[str, Any] = {"type": ["string", "number", "boolean", "null"]}
JSON_OBJECT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": {
        "anyOf": [
            _SCALAR,
            {"type": "array", "items": _SCALAR},
            {"type": "object", "additionalProperties": _SCALAR},
        ]
    },
}
"""``json_object``: any JSON object whose values nest at most two levels (arbitrary nesting is not a
regular language, and its regular approximations take tens of seconds to compile)."""


class ConstraintError(ValueError):
    """The constraint is invalid, unsupported or too slow to compile (a 400)."""


class CompileTimeout(ConstraintError):
    """The constraint took longer than the time limit to compile."""


@dataclass
class GuidedRow:
    """One sequence's position in a compiled constraint; with ``then``, once the constraint is
    matched the sequence may also go on with a match of ``then`` (and so on, any number of times).

    ``then`` is how a repetition of multi-token units (``A(BA)*``) is written for outlines-core: its
    index does not offer, in a state that is already a match, a token that leads to a state that is
    not a match yet (``a(bc)*`` allows only EOS after ``a``)."""

    guide: Guide
    vocab_size: int
    eos_id: int
    then: Index | None = None

    dead: bool = False  # a token outside the constraint was forced in (e.g. min_tokens held EOS back)

    def _tokens(self) -> list[int]:
        tokens: list[int] = list(self.guide.get_tokens())
        if self.then is not None and self.guide.is_finished():
            tokens += Guide(self.then).get_tokens()
        return tokens

    def mask(self) -> Tensor:
        allowed = torch.zeros(self.vocab_size, dtype=torch.bool)
        allowed[[self.eos_id] if self.dead else self._tokens()] = True
        return allowed

    def advance(self, token_id: int) -> None:
        if token_id == self.eos_id or self.dead:
            return
        if self.then is not None and self.guide.is_finished() and token_id not in self.guide.get_tokens():
            self.guide = Guide(self.then)
        try:
            self.guide.advance(token_id)
        except (ValueError, RuntimeError):
            self.dead = True


class Compiler:
    """Compiles regular expressions against one vocabulary, with a cache and a time limit."""

    def __init__(self, codec: Codec, eos_id: int) -> None:
        self.codec, self.eos_id = codec, eos_id
        self._vocab: Vocabulary | None = None
        self._cache: OrderedDict[str, Index] = OrderedDict()
        self._lock = Lock()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="toolkit-grammar")

    def _vocabulary(self) -> Vocabulary:
        """The ordinary tokens, and added ones that are not special (Qwen's ``<tool_call>``): a
        constraint may produce every token the model writes as text."""
        if self._vocab is None:
            tokens = {raw: list(ids) for raw, ids in self.codec.token_bytes.items()}
            for token_id, token in self.codec.tok.get_added_tokens_decoder().items():
                if not token.special:
                    tokens.setdefault(token.content.encode(), []).append(token_id)
            self._vocab = Vocabulary(self.eos_id, tokens)
        return self._vocab

    def index(self, regex: str, timeout: float = COMPILE_TIMEOUT_S) -> Index:
        with self._lock:
            if regex in self._cache:
                self._cache.move_to_end(regex)
                return self._cache[regex]
        future = self._pool.submit(lambda: Index(regex, self._vocabulary()))
        try:
            index = future.result(timeout=timeout)
        except FutureTimeout:
            raise CompileTimeout(
                f"The structured output constraint took longer than {timeout:g}s to compile."
            ) from None
        except (ValueError, RuntimeError) as exc:
            raise ConstraintError(f"Failed to transform regex into a grammar: {exc}") from exc
        with self._lock:
            self._cache[regex] = index
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        return index

    def row(self, index: Index, then: Index | None = None) -> GuidedRow:
        return GuidedRow(Guide(index), self.codec.vocab_size, self.eos_id, then)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def regex_for(kind: str, value: Any, whitespace: str | None = None) -> str:
    """The regular expression of one structured-outputs constraint."""
    if kind == "regex":
        if "\x00" in value:
            raise ConstraintError("Regex cannot contain NUL characters.")
        return str(value)
    if kind == "choice":
        return "(" + "|".join(re.escape(c) for c in value) + ")"
    if kind in ("json", "json_object"):
        schema = JSON_OBJECT_SCHEMA if kind == "json_object" else value
        text = schema if isinstance(schema, str) else json.dumps(schema)
        try:
            return str(build_regex_from_schema(text, whitespace))
        except (ValueError, TypeError) as exc:
            raise ConstraintError(f"Invalid JSON grammar specification. {exc}") from exc
    if kind == "grammar":
        return grammar_regex(value)
    raise ConstraintError(f"Unsupported structured output kind {kind!r}.")


_TOKEN = re.compile(
    r"""\s*(?:(?P<str>"(?:[^"\\]|\\.)*")|(?P<cls>\[(?:[^\]\\]|\\.)*\])|(?P<name>[A-Za-z_][\w-]*)"""
    r"""|(?P<rep>\{\d+(?:,\d*)?\})|(?P<op>[()|*+?]))"""
)


def grammar_regex(grammar: str) -> str:
    """Translate a non-recursive EBNF grammar (``root ::= ...``) into a regular expression."""
    rules: dict[str, str] = {}
    current: str | None = None
    for line in grammar.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if "::=" in line:
            name, _, body = line.partition("::=")
            current = name.strip()
            rules[current] = body
        elif current is not None:
            rules[current] += " " + line
        else:
            raise ConstraintError("Invalid grammar specification.")
    if "root" not in rules:
        raise ConstraintError("Invalid grammar specification: no `root` rule.")
    done: dict[str, str] = {}

    def expand(name: str, stack: tuple[str, ...]) -> str:
        if name in done:
            return done[name]
        if name in stack:
            raise ConstraintError(
                f"Recursive grammar rule `{name}` is not supported (regular grammars only)."
            )
        if name not in rules:
            raise ConstraintError(f"Invalid grammar specification: undefined rule `{name}`.")
        out: list[str] = []
        body = rules[name]
        pos = 0
        while pos < len(body):
            if not body[pos:].strip():
                break
            m = _TOKEN.match(body, pos)
            if m is None:
                raise ConstraintError(f"Invalid grammar specification near {body[pos : pos + 20]!r}.")
            pos = m.end()
            if m["str"]:
                out.append("(?:" + re.escape(json.loads(m["str"])) + ")")
            elif m["cls"]:
                out.append(m["cls"])
            elif m["name"]:
                out.append("(?:" + expand(m["name"], (*stack, name)) + ")")
            elif m["op"] == "(":
                out.append("(?:")
            else:
                out.append(m["rep"] or m["op"])
        done[name] = "".join(out)
        return done[name]

    return expand("root", ())
