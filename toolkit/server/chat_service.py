"""The chat-completion service: vLLM's request checks, prompt rendering, the engine call and the
response and chunk shapes (spec: chat-completions.md). The HTTP route and in-process callers (the
trace service's completions) use the same two functions.

Errors are :class:`~.errors.ApiError` subclasses: 400 ``BadRequestError`` for checks with vLLM's
messages, 400 ``Bad Request`` for field validation, 404 for unknown models. Checks vLLM runs inside
its engine raise :class:`EngineRejected`, which a stream reports as an error event.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .._version import __version__
from ..types.chat import (
    AssistantMessage,
    ChatCompletion,
    ChatCompletionChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChunkChoice,
    DeltaMessage,
    PromptTokensDetails,
    Usage,
)
from ..types.training import ChoiceLogprobs, TokenLogprob, TopLogprob
from .engine.engine import Engine
from .engine.events import Delta, Event, Failed, Finished, PromptLogprob, Started, TopLogprobs
from .engine.processors import REGISTRY, build
from .engine.request import BeamParams, Request, Weights
from .engine.sampling import GREEDY_EPS, LogitsProcessor, SamplingParams
from .engine.structured import ConstraintError, GuidedRow, regex_for
from .engine.template import TemplateError, render_chat
from .errors import ApiError, BadRequest, NotFound, _validation_message
from .state import Services
from .store.usage import ChatUsage
from .store.users import User

MAX_LOGPROBS = 20
MAX_N = 16384
MAX_BAD_WORDS = 128
ARTIFACT_PREFIX = "wandb-artifact:///"
_NO_VALUE = object()
_STEP = re.compile(r"^(?P<name>.+?):(?:step(?P<step>\d+)|(?P<latest>latest))$")
_UNION_LOC = re.compile(r"^(str|int|float|bool|none|[\w-]+\[.*\]|function-.*|constrained-.*)$")


class InvalidRequest(BadRequest):
    """A field failed validation: vLLM's ``"N validation error(s): ..."`` message, type ``Bad Request``."""

    error_type = "Bad Request"


class EngineRejected(BadRequest):
    """A check vLLM makes inside its engine: after a stream began, an error event instead of a 400."""


class EngineError(ApiError):
    status = 500
    error_type = "InternalServerError"


def _invalid(
    message: str, param: str | None = None, value: Any = _NO_VALUE, cls: type[BadRequest] = BadRequest
) -> BadRequest:
    """vLLM's ``VLLMValidationError``: the message ends with ``(parameter=P, value=V)`` when given."""
    parts = [f"parameter={param}"] if param else []
    if value is not _NO_VALUE:
        parts.append(f"value={value}")
    return cls(f"{message} ({', '.join(parts)})" if parts else message, param=param)


# ----------------------------------------------------------------------------- request checks


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
        raise _invalid("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
    _check_tools(b)
    so = b.get("structured_outputs")
    if isinstance(so, dict):
        kinds = [k for k in ("json", "regex", "choice") if so.get(k) is not None]
        if len(kinds) > 1:
            raise _invalid(
                "You can only use one kind of constraints for structured outputs "
                "('json', 'regex' or 'choice')."
            )
        if kinds and isinstance(b.get("tool_choice"), dict):
            raise _invalid("You can only either use constraints for structured outputs or tools, not both.")
    _check_logprobs(b)
    if b.get("stream_options") and not b.get("stream"):
        raise _invalid("Stream options can only be defined when `stream=True`.", "stream_options")
    rf = b.get("response_format")
    if isinstance(rf, dict) and rf.get("type") == "json_schema" and rf.get("json_schema") is None:
        raise _invalid(
            "When response_format type is 'json_schema', the 'json_schema' field must be provided.",
            "response_format",
        )
    salt = b.get("cache_salt")
    if "cache_salt" in b and salt is not None:
        if not isinstance(salt, str) or not salt:
            raise _invalid("Parameter 'cache_salt' must be a non-empty string if provided.", "cache_salt")
        if len(salt) > 128 or any(c in salt for c in "@/\\\x00"):
            raise _invalid(
                "Parameter 'cache_salt' must be at most 128 characters and must not contain "
                "'@', '/', '\\\\', or NUL.",
                "cache_salt",
            )


def _check_tools(b: dict[str, Any]) -> None:
    tools, choice = b.get("tools"), b.get("tool_choice")
    if isinstance(tools, list) and not tools:
        raise _invalid(
            "`tools` must not be an empty array. "
            "Either provide at least one tool or omit the field entirely.",
            "tools",
        )
    if choice is None or choice == "none":
        return
    if not tools:
        raise _invalid("When using `tool_choice`, `tools` must be set.", "tool_choice")
    if isinstance(choice, str):
        if choice not in ("auto", "required"):
            raise _invalid(
                f'Invalid value for `tool_choice`: {choice}! Only named tools, "none", "auto" or "required" '
                "are supported.",
                "tool_choice",
            )
        return
    if isinstance(choice, dict):
        usage = 'Correct usage: `{"type": "function", "function": {"name": "my_function"}}`'
        fn = choice.get("function")
        if not isinstance(fn, dict):
            raise _invalid(
                f"Invalid value for `function`: `{fn}` in `tool_choice`! {usage}", "tool_choice.function"
            )
        if "name" not in fn:
            raise _invalid(
                f"Expected field `name` in `function` in `tool_choice`! {usage}", "tool_choice.function.name"
            )
        name = fn["name"]
        if not isinstance(name, str) or not name:
            raise _invalid(
                f"Invalid `name` in `function`: `{name}` in `tool_choice`! {usage}",
                "tool_choice.function.name",
            )
        if not any(isinstance(t, dict) and (t.get("function") or {}).get("name") == name for t in tools):
            raise _invalid(
                "The tool specified in `tool_choice` does not match any of the specified `tools`",
                "tool_choice",
            )


def _check_logprobs(b: dict[str, Any]) -> None:
    for name in ("prompt_logprobs", "top_logprobs"):
        value = b.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise _invalid(f"`{name}` must be an integer.", name, value)
    prompt = b.get("prompt_logprobs")
    if prompt is not None:
        if b.get("stream") and (prompt > 0 or prompt == -1):
            raise _invalid("`prompt_logprobs` are not available when `stream=True`.", "prompt_logprobs")
        if prompt < 0 and prompt != -1:
            raise _invalid("`prompt_logprobs` must be a positive value or -1.", "prompt_logprobs", prompt)
    top = b.get("top_logprobs")
    if top is not None:
        if top < 0 and top != -1:
            raise _invalid("`top_logprobs` must be a positive value or -1.", "top_logprobs", top)
        if (top > 0 or top == -1) and not b.get("logprobs"):
            raise _invalid("when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs")


# ----------------------------------------------------------------------------- models


def resolve_model(svc: Services, user: User, name: str | None) -> Weights:
    """The weights a ``model`` string names: the base model, ``<name|id>[:step<N>|:latest]``, or
    ``wandb-artifact:///<entity>/<project>/<name>[:step<N>]``. Unknown: 404 as vLLM answers it."""
    engine: Engine = svc.engine
    if not name or name == engine.spec.name:
        return Weights("base")
    missing = NotFound(f"The model `{name}` does not exist.", param="model")
    entity = project = None
    ref = name
    if ref.startswith(ARTIFACT_PREFIX):
        parts = ref[len(ARTIFACT_PREFIX) :].split("/")
        if len(parts) != 3 or not all(parts):
            raise missing
        entity, project, ref = parts
    step: int | None = None
    match = _STEP.match(ref)
    if match:
        ref = match["name"]
        step = int(match["step"]) if match["step"] is not None else None
    model = svc.models.find(user, entity=entity, project=project, name=ref)
    if model is None and entity is None:
        try:
            model = svc.models.get(user, ref)
        except NotFound:
            model = None
    if model is None or model.base_model != engine.spec.name:
        raise missing
    row = (
        svc.models.checkpoint_at(model.id, step)
        if step is not None
        else svc.models.latest_checkpoint(model.id)
    )
    if row is None:
        raise missing
    if row.path is None:
        return Weights("base")
    folder = Path(row.path)
    if not (folder / "model.safetensors").exists():
        raise missing
    return Weights(row.id, folder)


# ----------------------------------------------------------------------------- preparation


@dataclass
class Prepared:
    """A checked request, ready for the engine, and what its response needs."""

    req: ChatCompletionRequest
    job: Request
    model: str
    id: str
    created: int
    role: str
    echo: str | None
    fingerprint: str
    user: User
    project: str
    top_logprobs: int


def _value(r: ChatCompletionRequest, name: str, defaults: dict[str, Any], fallback: float) -> float:
    """The request's value, else the model's generation_config.json default, else OpenAI's."""
    value = getattr(r, name) if name in r.model_fields_set else None
    return float(defaults.get(name, fallback) if value is None else value)


def _sampling(r: ChatCompletionRequest, max_tokens: int, n: int, defaults: dict[str, Any]) -> SamplingParams:
    """SamplingParams with vLLM's ``to_sampling_params`` checks (HTTP 400 before any stream)."""
    if n < 1:
        raise _invalid(f"n must be at least 1, got {n}.")
    if n > MAX_N:
        raise _invalid(
            f"n must be at most {MAX_N}, got {n}. To increase this limit, set the VLLM_MAX_N_SEQUENCES "
            "environment variable."
        )
    presence, frequency = (
        _value(r, "presence_penalty", defaults, 0.0),
        _value(r, "frequency_penalty", defaults, 0.0),
    )
    if not -2.0 <= presence <= 2.0:
        raise _invalid(f"presence_penalty must be in [-2, 2], got {presence}.")
    if not -2.0 <= frequency <= 2.0:
        raise _invalid(f"frequency_penalty must be in [-2, 2], got {frequency}.")
    repetition = _value(r, "repetition_penalty", defaults, 1.0)
    if not math.isfinite(repetition):
        raise _invalid(f"repetition_penalty must be a finite number, got {repetition}.")
    if repetition <= 0:
        raise _invalid(f"repetition_penalty must be greater than zero, got {repetition}.")
    temperature = _value(r, "temperature", defaults, 1.0)
    if not math.isfinite(temperature):
        raise _invalid(f"temperature must be a finite number, got {temperature}.", "temperature", temperature)
    if temperature < 0:
        raise _invalid(f"temperature must be non-negative, got {temperature}.", "temperature", temperature)
    if temperature > 2:
        raise _invalid(f"temperature must be in [0, 2], got {temperature}.", "temperature", temperature)
    top_p = _value(r, "top_p", defaults, 1.0)
    top_k = int(_value(r, "top_k", defaults, 0))
    top_k = 0 if top_k == -1 else top_k
    min_p = _value(r, "min_p", defaults, 0.0)
    if temperature < GREEDY_EPS:
        if n > 1 and not r.use_beam_search:
            raise _invalid(f"n must be 1 when using greedy sampling, got {n}.")
        top_p, top_k, min_p = 1.0, 0, 0.0
    if not 0 < top_p <= 1:
        raise _invalid(f"top_p must be in (0, 1], got {top_p}.", "top_p")
    if top_k < 0:
        raise _invalid(f"top_k must be 0 (disable), or at least 1, got {top_k}.", "top_k")
    if not 0 <= min_p <= 1:
        raise _invalid(f"min_p must be in [0, 1], got {min_p}.", "min_p")
    if max_tokens < 1:
        raise _invalid(f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens")
    if r.min_tokens < 0:
        raise _invalid(f"min_tokens must be greater than or equal to 0, got {r.min_tokens}.")
    if r.min_tokens > max_tokens:
        raise _invalid(
            f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {r.min_tokens}."
        )
    stop = [r.stop] if isinstance(r.stop, str) else list(r.stop or [])
    if "" in stop:
        raise _invalid("stop cannot contain an empty string.")
    if "" in r.bad_words:
        raise _invalid(f"bad_words cannot contain an empty string. Got bad_words={r.bad_words}")
    bias: dict[int, float] = {}
    bad_keys = []
    for key, value in (r.logit_bias or {}).items():
        try:
            bias[int(key)] = max(-100.0, min(100.0, float(value)))
        except ValueError:
            bad_keys.append(key)
    if bad_keys:
        raise _invalid(
            f"logit_bias contains key(s) that cannot be converted to integer token IDs: {bad_keys}",
            "logit_bias",
        )
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        min_p=min_p,
        presence_penalty=presence,
        frequency_penalty=frequency,
        repetition_penalty=repetition,
        logit_bias=bias,
        seed=None if r.seed is None or r.seed == -1 else r.seed,
        min_tokens=r.min_tokens,
        ignore_eos=r.ignore_eos,
        stop=stop,
        stop_token_ids=list(dict.fromkeys(r.stop_token_ids or [])),
        include_stop_str_in_output=r.include_stop_str_in_output,
        allowed_token_ids=r.allowed_token_ids,
        skip_special_tokens=r.skip_special_tokens,
        spaces_between_special_tokens=r.spaces_between_special_tokens,
    )


def _constraint(r: ChatCompletionRequest) -> tuple[str, Any, str | None] | None:
    """(kind, value, whitespace pattern) of the request's structured output, if any."""
    so = r.structured_outputs
    fields: dict[str, Any] = {}
    if so is not None:
        candidates = {
            "json": so.json_,
            "regex": so.regex,
            "choice": so.choice,
            "grammar": so.grammar,
            "json_object": so.json_object,
            "structural_tag": so.structural_tag,
        }
        fields = {k: v for k, v in candidates.items() if v is not None}
    rf = r.response_format
    if rf is not None and rf.type == "json_object":
        fields = {"json_object": True}
    elif rf is not None and rf.type == "json_schema" and rf.json_schema is not None:
        fields = {"json": rf.json_schema.schema_ if rf.json_schema.schema_ is not None else {}}
    elif rf is not None and rf.type == "structural_tag":
        fields = {"structural_tag": rf.model_dump(exclude={"type"})}
    if not fields:
        if so is not None:
            raise _invalid(
                f"You must use one kind of structured outputs constraint but none are specified: {fields}"
            )
        return None
    if len(fields) > 1:
        raise _invalid(
            f"You can only use one kind of structured outputs constraint but multiple are specified: {fields}"
        )
    kind, value = next(iter(fields.items()))
    if kind == "choice" and not value:
        raise _invalid("Choice '[]' cannot be an empty list")
    if kind in ("grammar", "json") and value == "":
        raise _invalid(f"structured_outputs.{kind} cannot be an empty string")
    if kind == "json_object" and value is not True:
        raise _invalid(
            "structured_outputs.json_object must be True if set; set it to true or leave it unset."
        )
    if kind == "structural_tag":
        raise _invalid(
            "structural_tag is not supported by this server's structured-output backend (outlines-core)."
        )
    whitespace = None
    if so is not None:
        whitespace = (
            so.whitespace_pattern
            if so.whitespace_pattern is not None
            else ("" if so.disable_any_whitespace else None)
        )
    return kind, value, whitespace


def _processors(r: ChatCompletionRequest, vocab: int) -> list[LogitsProcessor]:
    out = []
    for item in r.logits_processors or []:
        name, args, kwargs = (
            (item, None, None) if isinstance(item, str) else (item.qualname, item.args, item.kwargs_)
        )
        if name not in REGISTRY:
            raise _invalid(
                f"Logits processor {name!r} is not registered on this server; registered: "
                f"{', '.join(sorted(REGISTRY))}.",
                "logits_processors",
            )
        try:
            out.append(build(name, args, kwargs, vocab))
        except (TypeError, ValueError, IndexError) as exc:
            raise _invalid(
                f"Invalid arguments for logits processor {name!r}: {exc}", "logits_processors"
            ) from None
    return out


def _render(svc: Services, r: ChatCompletionRequest) -> str:
    engine: Engine = svc.engine
    kwargs = dict(r.chat_template_kwargs or {})
    requested = r.chat_template or kwargs.pop("chat_template", None)
    if requested and not svc.settings.trust_request_chat_template:
        raise _invalid(
            "Chat template is passed with request, but --trust-request-chat-template is not set. "
            "Refused request with untrusted chat template."
        )
    for reserved in ("messages", "add_generation_prompt", "continue_final_message", "tools", "documents"):
        kwargs.pop(reserved, None)
    if r.reasoning_effort is not None:
        kwargs.setdefault("reasoning_effort", r.reasoning_effort)
    try:
        return render_chat(
            requested or engine.spec.chat_template,
            r.messages,
            add_generation_prompt=r.add_generation_prompt,
            continue_final_message=r.continue_final_message,
            tools=r.tools,
            documents=r.documents,
            **kwargs,
        )
    except (TemplateError, TypeError, ValueError) as exc:
        raise _invalid(str(exc)) from None


def _check_tool_choice(r: ChatCompletionRequest) -> None:
    choice = r.tool_choice
    if choice is None or choice == "none":
        return
    if choice == "auto":
        raise _invalid(
            '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
        )
    if choice == "required":
        raise _invalid('tool_choice="required" requires --tool-call-parser to be set')
    name = (choice.get("function") or {}).get("name") if isinstance(choice, dict) else choice
    raise _invalid(f'tool_choice=function "{name}" requires --tool-call-parser to be set')


def _engine_checks(svc: Services, r: ChatCompletionRequest, params: SamplingParams) -> list[list[int]]:
    """The checks vLLM makes in its engine (in-stream errors); returns the bad-word token sequences."""
    engine: Engine = svc.engine
    vocab = engine.vocab_size
    if r.logprobs:
        k = vocab if r.top_logprobs == -1 else (r.top_logprobs or 0)
        if k > MAX_LOGPROBS:
            raise _invalid(
                f"Requested sample logprobs of {k}, which is greater than max allowed: {MAX_LOGPROBS}",
                "logprobs",
                k,
                EngineRejected,
            )
    if r.prompt_logprobs is not None:
        k = vocab if r.prompt_logprobs == -1 else r.prompt_logprobs
        if k > MAX_LOGPROBS:
            raise _invalid(
                f"Requested prompt logprobs of {k}, which is greater than max allowed: {MAX_LOGPROBS}",
                "prompt_logprobs",
                k,
                EngineRejected,
            )
    for field, ids in (("stop_token_ids", params.stop_token_ids), ("logit_bias", list(params.logit_bias))):
        bad = [i for i in ids if not 0 <= i < vocab]
        if bad:
            raise _invalid(
                f"token_id(s) {bad} in {field} contain out-of-vocab token ids. Vocabulary size: {vocab}",
                field,
                cls=EngineRejected,
            )
    if params.allowed_token_ids is not None:
        if not params.allowed_token_ids:
            raise _invalid(
                "allowed_token_ids is not None and empty!", "allowed_token_ids", cls=EngineRejected
            )
        if any(not 0 <= i < vocab for i in params.allowed_token_ids):
            raise _invalid(
                "allowed_token_ids contains out-of-vocab token id!", "allowed_token_ids", cls=EngineRejected
            )
    words: list[list[int]] = []
    for word in r.bad_words:
        for variant in dict.fromkeys((word, " " + word.lstrip())):
            ids = engine.codec.encode(variant)
            if not ids:
                raise _invalid(
                    "bad_words entries must tokenize to at least one token.", "bad_words", cls=EngineRejected
                )
            words.append(ids)
    if len(words) > MAX_BAD_WORDS:
        raise _invalid(
            f"Too many bad words after tokenization: {len(words)}. The max number is {MAX_BAD_WORDS}.",
            "bad_words",
            cls=EngineRejected,
        )
    return words


def prepare(
    svc: Services, user: User, body: Any, project: str | None, stream: bool | None = None
) -> Prepared:
    """Check a request in vLLM's order and turn it into an engine request (blocking: run in a thread)."""
    r = parse_request(body)
    if stream is not None and bool(r.stream) != stream:
        r.stream = stream
    engine: Engine = svc.engine
    weights = resolve_model(svc, user, r.model)
    if r.priority != 0 and not engine.priority_scheduling:
        raise _invalid(f"Got priority {r.priority} but Priority scheduling is not enabled.", "priority")
    _check_tool_choice(r)
    if r.mm_processor_kwargs:
        raise _invalid(
            "Per-request mm_processor_kwargs are disabled by default: the served model takes text only.",
            "mm_processor_kwargs",
        )
    prompt = engine.codec.encode(_render(svc, r), add_special_tokens=r.add_special_tokens)
    max_len = engine.spec.max_model_len
    if r.truncate_prompt_tokens is not None:
        if r.truncate_prompt_tokens > max_len:
            raise _invalid(
                f"truncate_prompt_tokens={r.truncate_prompt_tokens} cannot be greater than max_model_len = "
                f"{max_len}. Please request a smaller truncation size."
            )
        keep = max_len - 1 if r.truncate_prompt_tokens == -1 else r.truncate_prompt_tokens
        if keep > 0:
            prompt = prompt[-keep:]
    if not prompt:
        raise _invalid("The decoder prompt cannot be empty")
    if len(prompt) > max_len:
        raise _invalid(
            f"This model's maximum context length is {max_len} tokens. However, your prompt contains "
            f"{len(prompt)} input tokens, which exceeds this limit even without any output tokens. Please "
            "reduce the length of the input prompt.",
            "input_tokens",
            len(prompt),
        )
    requested = r.max_completion_tokens if r.max_completion_tokens is not None else r.max_tokens
    if requested is not None and requested > max_len:
        field = "max_completion_tokens" if r.max_completion_tokens is not None else "max_tokens"
        raise _invalid(
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
    params = _sampling(r, max_tokens, n, defaults)
    params.logits_processors = _processors(r, engine.vocab_size)
    constraint = _constraint(r)
    prompt_logprobs = r.prompt_logprobs
    if r.echo and prompt_logprobs is None and r.logprobs and not r.stream:
        prompt_logprobs = r.top_logprobs or 0
    top_logprobs = (r.top_logprobs or 0) if r.logprobs else 0
    if r.logprobs:
        params.logprobs = top_logprobs
    params.bad_words_ids = _engine_checks(svc, r, params)
    guides: list[GuidedRow | None] = [None] * n
    if constraint is not None:
        kind, value, whitespace = constraint
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
    name = r.model or engine.spec.name
    return Prepared(
        req=r,
        job=job,
        model=name,
        id=f"chatcmpl-{request_id}",
        created=int(time.time()),
        role=role,
        echo=echo,
        fingerprint=f"toolkit-{__version__}-{hashlib.sha256(engine.spec.name.encode()).hexdigest()[:8]}",
        user=user,
        project=ChatUsage.project_of(user, project),
        top_logprobs=top_logprobs,
    )


# ----------------------------------------------------------------------------- formatting


class _Formatter:
    """Token strings, logprob entries and prompt logprobs in the response's terms."""

    def __init__(self, svc: Services, prep: Prepared) -> None:
        engine: Engine = svc.engine
        self.codec = engine.codec
        self.as_ids = bool(prep.req.return_tokens_as_token_ids)
        self.top_n = prep.top_logprobs

    def token(self, token_id: int, previous: list[int]) -> str:
        return f"token_id:{token_id}" if self.as_ids else self.codec.token_text(token_id, previous)

    def entries(
        self, ids: list[int], values: list[tuple[float, TopLogprobs]], before: list[int]
    ) -> list[TokenLogprob]:
        out = []
        previous = list(before)
        for token_id, (logprob, top) in zip(ids, values, strict=False):
            ranked = [(token_id, logprob), *((i, v) for i, v in top if i != token_id)][: self.top_n]
            text = self.token(token_id, previous)
            out.append(
                TokenLogprob(
                    token=text,
                    logprob=max(logprob, -9999.0),
                    bytes=list(text.encode("utf-8", errors="replace")),
                    top_logprobs=[
                        TopLogprob(
                            token=(t := self.token(i, previous)),
                            logprob=max(v, -9999.0),
                            bytes=list(t.encode("utf-8", errors="replace")),
                        )
                        for i, v in ranked
                    ],
                )
            )
            previous.append(token_id)
        return out

    def prompt_logprobs(self, entries: list[PromptLogprob]) -> list[dict[str, Any] | None]:
        out: list[dict[str, Any] | None] = [None]
        for e in entries:
            item = {str(e.token_id): self._prompt_entry(e.token_id, e.logprob, e.rank)}
            for rank, (i, v) in enumerate(e.top, start=1):
                item.setdefault(str(i), self._prompt_entry(i, v, rank))
            out.append(item)
        return out

    def _prompt_entry(self, token_id: int, logprob: float, rank: int) -> dict[str, Any]:
        return {"logprob": max(logprob, -9999.0), "rank": rank, "decoded_token": self.token(token_id, [])}


async def _events(svc: Services, prep: Prepared) -> AsyncIterator[Event]:
    """The engine's events of one request; cancels it if the consumer goes away early."""
    engine: Engine = svc.engine
    queue = engine.submit(prep.job)
    remaining = len(prep.job.params)
    try:
        while remaining:
            event = await queue.get()
            if isinstance(event, Failed):
                if isinstance(event.error, FileNotFoundError):  # checkpoint deleted since it was resolved
                    raise NotFound(f"The model `{prep.model}` does not exist.", param="model")
                raise EngineError("Internal server error")
            if isinstance(event, Finished):
                remaining -= 1
            yield event
    finally:
        if remaining:
            engine.cancel(prep.job)


def _record(svc: Services, prep: Prepared, prompt: int, completion: int, cached: int) -> None:
    if svc.usage is not None:
        svc.usage.record(prep.user, prep.project, prep.model, prompt, completion, cached)


def _usage(prompt: int, completion: int, cached: int) -> Usage:
    return Usage(
        prompt_tokens=prompt,
        total_tokens=prompt + completion,
        completion_tokens=completion,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=cached),
    )


async def create_chat_completion(
    svc: Services, user: User, body: dict[str, Any], project: str | None = None
) -> ChatCompletion:
    """Create a chat completion (the whole response at once); ``project`` is ``team/project``."""
    prep = await asyncio.to_thread(prepare, svc, user, body, project, False)
    fmt = _Formatter(svc, prep)
    started: Started | None = None
    finished: dict[int, Finished] = {}
    async for event in _events(svc, prep):
        if isinstance(event, Started):
            started = event
        elif isinstance(event, Finished):
            finished[event.index] = event
    assert started is not None
    r, prompt = prep.req, prep.job.prompt_ids
    choices = []
    for index in sorted(finished):
        f = finished[index]
        logprobs = (
            ChoiceLogprobs(content=fmt.entries(f.token_ids, f.logprobs, []))
            if f.logprobs is not None
            else None
        )
        choices.append(
            ChatCompletionChoice(
                index=index,
                message=AssistantMessage(role=prep.role, content=(prep.echo or "") + f.text),
                logprobs=logprobs,
                finish_reason=f.finish_reason,
                stop_reason=f.stop_reason,
                token_ids=f.token_ids if r.return_token_ids else None,
            )
        )
    completion = sum(len(f.token_ids) for f in finished.values())
    await asyncio.to_thread(_record, svc, prep, len(prompt), completion, started.cached_tokens)
    return ChatCompletion(
        id=prep.id,
        created=prep.created,
        model=prep.model,
        choices=choices,
        system_fingerprint=prep.fingerprint,
        usage=_usage(len(prompt), completion, started.cached_tokens),
        prompt_logprobs=fmt.prompt_logprobs(started.prompt_logprobs)
        if started.prompt_logprobs is not None
        else None,
        prompt_token_ids=prompt if r.return_token_ids else None,
    )


async def stream_chat_completion(
    svc: Services, user: User, body: dict[str, Any], project: str | None = None
) -> AsyncIterator[ChatCompletionChunk]:
    """Create a chat completion as chunks (vLLM's sequence: role chunk, content chunks, final chunk,
    optional usage chunk). Request errors raise before the first chunk; see :class:`EngineRejected`."""
    prep = await asyncio.to_thread(prepare, svc, user, body, project, True)
    r, prompt = prep.req, prep.job.prompt_ids
    fmt = _Formatter(svc, prep)
    options = r.stream_options
    include_usage = bool(options and options.include_usage)
    continuous = include_usage and bool(options and options.continuous_usage_stats)
    with_ids = bool(r.return_token_ids)
    counts = [0] * len(prep.job.params)
    seen: list[list[int]] = [[] for _ in prep.job.params]

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

    def content(delta: Delta, **final: Any) -> ChatCompletionChunk:
        counts[delta.index] += len(delta.token_ids)
        logprobs = None
        if r.logprobs:
            logprobs = ChoiceLogprobs(content=fmt.entries(delta.token_ids, delta.logprobs, seen[delta.index]))
        seen[delta.index].extend(delta.token_ids)
        choice = ChunkChoice(
            index=delta.index,
            delta=DeltaMessage(content=delta.text),
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
    async for event in _events(svc, prep):
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
            yield content(tail, finish_reason=event.finish_reason, stop_reason=event.stop_reason)
    completion = sum(counts)
    await asyncio.to_thread(_record, svc, prep, len(prompt), completion, cached)
    if include_usage:
        yield ChatCompletionChunk(
            id=prep.id,
            object="chat.completion.chunk",
            created=prep.created,
            model=prep.model,
            choices=[],
            usage=_usage(len(prompt), completion, cached),
            system_fingerprint=prep.fingerprint,
        )
