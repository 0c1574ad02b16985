"""vLLM's request checks, in its order and with its messages (chat-completions.md part 1).

:func:`parse_request` runs the raw-body checks, then field validation; :func:`engine_checks` are the
checks vLLM makes inside its engine (:class:`~.errors.EngineRejected`: an error event once a stream
began).
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from ...types.chat import ChatCompletionRequest
from ..engine.engine import Engine
from ..engine.sampling import SamplingParams
from ..errors import _validation_message
from .errors import EngineRejected, InvalidRequest, invalid

MAX_LOGPROBS = 20
MAX_BAD_WORDS = 128
_UNION_LOC = re.compile(r"^(str|int|float|bool|none|[\w-]+\[.*\]|function-.*|constrained-.*)$")


def parse_request(body: Any) -> ChatCompletionRequest:
    """vLLM's raw-body checks in its order, then field validation."""
    if isinstance(body, dict):
        _check_raw(body)
    try:
        return ChatCompletionRequest.model_validate(body)
    except ValidationError as exc:
        errors: list[dict[str, Any]] = [
            {**e, "loc": ("body", *(p for p in e["loc"] if not (isinstance(p, str) and _UNION_LOC.match(p))))}
            for e in exc.errors()
        ]
        param = ".".join(str(p) for p in errors[0]["loc"]) if errors else None
        raise InvalidRequest(_validation_message(errors), param=param) from None


def _check_raw(b: dict[str, Any]) -> None:
    if b.get("continue_final_message") and b.get("add_generation_prompt"):
        raise invalid("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
    _check_tools(b)
    so = b.get("structured_outputs")
    if isinstance(so, dict):
        kinds = [k for k in ("json", "regex", "choice") if so.get(k) is not None]
        if len(kinds) > 1:
            raise invalid(
                "You can only use one kind of constraints for structured outputs "
                "('json', 'regex' or 'choice')."
            )
    if _constrained(b) and (isinstance(b.get("tool_choice"), dict) or b.get("tool_choice") == "required"):
        raise invalid("You can only either use constraints for structured outputs or tools, not both.")
    _check_logprobs(b)
    if b.get("stream_options") and not b.get("stream"):
        raise invalid("Stream options can only be defined when `stream=True`.", "stream_options")
    rf = b.get("response_format")
    if isinstance(rf, dict) and rf.get("type") == "json_schema" and rf.get("json_schema") is None:
        raise invalid(
            "When response_format type is 'json_schema', the 'json_schema' field must be provided.",
            "response_format",
        )
    salt = b.get("cache_salt")
    if "cache_salt" in b and salt is not None:
        if not isinstance(salt, str) or not salt:
            raise invalid("Parameter 'cache_salt' must be a non-empty string if provided.", "cache_salt")
        if len(salt) > 128 or any(c in salt for c in "@/\\\x00"):
            raise invalid(
                "Parameter 'cache_salt' must be at most 128 characters and must not contain "
                "'@', '/', '\\\\', or NUL.",
                "cache_salt",
            )


def _constrained(b: dict[str, Any]) -> bool:
    """Whether the body asks for a structured output (``structured_outputs`` or a ``response_format``
    other than text): it cannot be combined with a ``required`` or named tool choice."""
    so, rf = b.get("structured_outputs"), b.get("response_format")
    if isinstance(so, dict) and any(v is not None and v is not False for k, v in so.items() if k in _KINDS):
        return True
    return isinstance(rf, dict) and rf.get("type") not in (None, "text")


_KINDS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")


def _check_tools(b: dict[str, Any]) -> None:
    tools, choice = b.get("tools"), b.get("tool_choice")
    if isinstance(tools, list) and not tools:
        raise invalid(
            "`tools` must not be an empty array. "
            "Either provide at least one tool or omit the field entirely.",
            "tools",
        )
    if choice is None or choice == "none":
        return
    if not tools:
        raise invalid("When using `tool_choice`, `tools` must be set.", "tool_choice")
    if isinstance(choice, str):
        if choice not in ("auto", "required"):
            raise invalid(
                f'Invalid value for `tool_choice`: {choice}! Only named tools, "none", "auto" or "required" '
                "are supported.",
                "tool_choice",
            )
        return
    if isinstance(choice, dict):
        usage = 'Correct usage: `{"type": "function", "function": {"name": "my_function"}}`'
        fn = choice.get("function")
        if not isinstance(fn, dict):
            raise invalid(
                f"Invalid value for `function`: `{fn}` in `tool_choice`! {usage}", "tool_choice.function"
            )
        if "name" not in fn:
            raise invalid(
                f"Expected field `name` in `function` in `tool_choice`! {usage}", "tool_choice.function.name"
            )
        name = fn["name"]
        if not isinstance(name, str) or not name:
            raise invalid(
                f"Invalid `name` in `function`: `{name}` in `tool_choice`! {usage}",
                "tool_choice.function.name",
            )
        if not any(isinstance(t, dict) and (t.get("function") or {}).get("name") == name for t in tools):
            raise invalid(
                "The tool specified in `tool_choice` does not match any of the specified `tools`",
                "tool_choice",
            )


def _check_logprobs(b: dict[str, Any]) -> None:
    for name in ("prompt_logprobs", "top_logprobs"):
        value = b.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise invalid(f"`{name}` must be an integer.", name, value)
    prompt = b.get("prompt_logprobs")
    if prompt is not None:
        if b.get("stream") and (prompt > 0 or prompt == -1):
            raise invalid("`prompt_logprobs` are not available when `stream=True`.", "prompt_logprobs")
        if prompt < 0 and prompt != -1:
            raise invalid("`prompt_logprobs` must be a positive value or -1.", "prompt_logprobs", prompt)
    top = b.get("top_logprobs")
    if top is not None:
        if top < 0 and top != -1:
            raise invalid("`top_logprobs` must be a positive value or -1.", "top_logprobs", top)
        if (top > 0 or top == -1) and not b.get("logprobs"):
            raise invalid("when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs")


def engine_checks(engine: Engine, r: ChatCompletionRequest, params: SamplingParams) -> list[list[int]]:
    """The checks vLLM makes in its engine (in-stream errors); returns the bad-word token sequences."""
    vocab = engine.vocab_size
    if r.logprobs:
        k = vocab if r.top_logprobs == -1 else (r.top_logprobs or 0)
        if k > MAX_LOGPROBS:
            raise invalid(
                f"Requested sample logprobs of {k}, which is greater than max allowed: {MAX_LOGPROBS}",
                "logprobs",
                k,
                EngineRejected,
            )
    if r.prompt_logprobs is not None:
        k = vocab if r.prompt_logprobs == -1 else r.prompt_logprobs
        if k > MAX_LOGPROBS:
            raise invalid(
                f"Requested prompt logprobs of {k}, which is greater than max allowed: {MAX_LOGPROBS}",
                "prompt_logprobs",
                k,
                EngineRejected,
            )
    for field, ids in (("stop_token_ids", params.stop_token_ids), ("logit_bias", list(params.logit_bias))):
        bad = [i for i in ids if not 0 <= i < vocab]
        if bad:
            raise invalid(
                f"token_id(s) {bad} in {field} contain out-of-vocab token ids. Vocabulary size: {vocab}",
                field,
                cls=EngineRejected,
            )
    if params.allowed_token_ids is not None:
        if not params.allowed_token_ids:
            raise invalid("allowed_token_ids is not None and empty!", "allowed_token_ids", cls=EngineRejected)
        if any(not 0 <= i < vocab for i in params.allowed_token_ids):
            raise invalid(
                "allowed_token_ids contains out-of-vocab token id!", "allowed_token_ids", cls=EngineRejected
            )
    words: list[list[int]] = []
    for word in r.bad_words:
        for variant in dict.fromkeys((word, " " + word.lstrip())):
            ids = engine.codec.encode(variant)
            if not ids:
                raise invalid(
                    "bad_words entries must tokenize to at least one token.", "bad_words", cls=EngineRejected
                )
            words.append(ids)
    if len(words) > MAX_BAD_WORDS:
        raise invalid(
            f"Too many bad words after tokenization: {len(words)}. The max number is {MAX_BAD_WORDS}.",
            "bad_words",
            cls=EngineRejected,
        )
    return words
