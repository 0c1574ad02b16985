"""A request's generation settings in engine terms, with vLLM's checks (HTTP 400 before any stream):
sampling parameters (``to_sampling_params``), the structured-output constraint, logits processors."""

from __future__ import annotations

import math
from typing import Any

from ...types.chat import ChatCompletionRequest
from ..engine.processors import REGISTRY, build
from ..engine.sampling import GREEDY_EPS, LogitsProcessor, SamplingParams
from .errors import invalid

MAX_N = 16384


def _value(r: ChatCompletionRequest, name: str, defaults: dict[str, Any], fallback: float) -> float:
    """The request's value, else the model's generation_config.json default, else OpenAI's."""
    value = getattr(r, name) if name in r.model_fields_set else None
    return float(defaults.get(name, fallback) if value is None else value)


def sampling_params(
    r: ChatCompletionRequest, max_tokens: int, n: int, defaults: dict[str, Any]
) -> SamplingParams:
    """SamplingParams with vLLM's ``to_sampling_params`` checks (HTTP 400 before any stream)."""
    if n < 1:
        raise invalid(f"n must be at least 1, got {n}.")
    if n > MAX_N:
        raise invalid(
            f"n must be at most {MAX_N}, got {n}. To increase this limit, set the VLLM_MAX_N_SEQUENCES "
            "environment variable."
        )
    presence, frequency = (
        _value(r, "presence_penalty", defaults, 0.0),
        _value(r, "frequency_penalty", defaults, 0.0),
    )
    if not -2.0 <= presence <= 2.0:
        raise invalid(f"presence_penalty must be in [-2, 2], got {presence}.")
    if not -2.0 <= frequency <= 2.0:
        raise invalid(f"frequency_penalty must be in [-2, 2], got {frequency}.")
    repetition = _value(r, "repetition_penalty", defaults, 1.0)
    if not math.isfinite(repetition):
        raise invalid(f"repetition_penalty must be a finite number, got {repetition}.")
    if repetition <= 0:
        raise invalid(f"repetition_penalty must be greater than zero, got {repetition}.")
    temperature = _value(r, "temperature", defaults, 1.0)
    if not math.isfinite(temperature):
        raise invalid(f"temperature must be a finite number, got {temperature}.", "temperature", temperature)
    if temperature < 0:
        raise invalid(f"temperature must be non-negative, got {temperature}.", "temperature", temperature)
    if temperature > 2:
        raise invalid(f"temperature must be in [0, 2], got {temperature}.", "temperature", temperature)
    top_p = _value(r, "top_p", defaults, 1.0)
    top_k = int(_value(r, "top_k", defaults, 0))
    top_k = 0 if top_k == -1 else top_k
    min_p = _value(r, "min_p", defaults, 0.0)
    if temperature < GREEDY_EPS:
        if n > 1 and not r.use_beam_search:
            raise invalid(f"n must be 1 when using greedy sampling, got {n}.")
        top_p, top_k, min_p = 1.0, 0, 0.0
    if not 0 < top_p <= 1:
        raise invalid(f"top_p must be in (0, 1], got {top_p}.", "top_p")
    if top_k < 0:
        raise invalid(f"top_k must be 0 (disable), or at least 1, got {top_k}.", "top_k")
    if not 0 <= min_p <= 1:
        raise invalid(f"min_p must be in [0, 1], got {min_p}.", "min_p")
    if max_tokens < 1:
        raise invalid(f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens")
    if r.min_tokens < 0:
        raise invalid(f"min_tokens must be greater than or equal to 0, got {r.min_tokens}.")
    if r.min_tokens > max_tokens:
        raise invalid(
            f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {r.min_tokens}."
        )
    stop = [r.stop] if isinstance(r.stop, str) else list(r.stop or [])
    if "" in stop:
        raise invalid("stop cannot contain an empty string.")
    if "" in r.bad_words:
        raise invalid(f"bad_words cannot contain an empty string. Got bad_words={r.bad_words}")
    bias: dict[int, float] = {}
    bad_keys = []
    for key, value in (r.logit_bias or {}).items():
        try:
            bias[int(key)] = max(-100.0, min(100.0, float(value)))
        except ValueError:
            bad_keys.append(key)
    if bad_keys:
        raise invalid(
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


def constraint(r: ChatCompletionRequest) -> tuple[str, Any, str | None] | None:
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
            raise invalid(
                f"You must use one kind of structured outputs constraint but none are specified: {fields}"
            )
        return None
    if len(fields) > 1:
        raise invalid(
            f"You can only use one kind of structured outputs constraint but multiple are specified: {fields}"
        )
    kind, value = next(iter(fields.items()))
    if kind == "choice" and not value:
        raise invalid("Choice '[]' cannot be an empty list")
    if kind in ("grammar", "json") and value == "":
        raise invalid(f"structured_outputs.{kind} cannot be an empty string")
    if kind == "json_object" and value is not True:
        raise invalid("structured_outputs.json_object must be True if set; set it to true or leave it unset.")
    if kind == "structural_tag":
        raise invalid(
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


def logits_processors(r: ChatCompletionRequest, vocab: int) -> list[LogitsProcessor]:
    """The request's ``logits_processors``, built from the server's registry (never imported)."""
    out = []
    for item in r.logits_processors or []:
        name, args, kwargs = (
            (item, None, None) if isinstance(item, str) else (item.qualname, item.args, item.kwargs_)
        )
        if name not in REGISTRY:
            raise invalid(
                f"Logits processor {name!r} is not registered on this server; registered: "
                f"{', '.join(sorted(REGISTRY))}.",
                "logits_processors",
            )
        try:
            out.append(build(name, args, kwargs, vocab))
        except (TypeError, ValueError, IndexError) as exc:
            raise invalid(
                f"Invalid arguments for logits processor {name!r}: {exc}", "logits_processors"
            ) from None
    return out
