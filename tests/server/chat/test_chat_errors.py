"""Bad chat requests answer vLLM's exact error bodies (``{"error": {message, type, param, code}}``)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

USER = [{"role": "user", "content": "hi"}]


def bad(
    message: str, param: str | None = None, type_: str = "BadRequestError", code: int = 400
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def post(http: httpx.Client, body: Any) -> httpx.Response:
    return http.post("/v1/chat/completions", json=body)


def test_field_validation_uses_vllm_message_format(http: httpx.Client) -> None:
    r = post(http, {"messages": USER, "seed": 2**64})
    assert r.status_code == 400
    assert r.json() == bad(
        "1 validation error:\n  {'type': 'less_than_equal', 'loc': 'body.seed', 'msg': 'Input should be less "
        "than or equal to 9223372036854775807', 'input': '18446744073709551616', "
        "'ctx': {'le': 9223372036854775807}}",
        "body.seed",
        "Bad Request",
    )
    missing = post(http, {"model": None}).json()["error"]
    assert missing["param"] == "body.messages" and "'type': 'missing'" in missing["message"]
    assert post(http, {"messages": USER, "n": "abc"}).json()["error"]["param"] == "body.n"
    truncate = post(http, {"messages": USER, "truncate_prompt_tokens": -2}).json()["error"]
    assert truncate["param"] == "body.truncate_prompt_tokens" and "'ge': -1" in truncate["message"]
    stops = post(http, {"messages": USER, "stop": ["a", "b", "c", "d", "e"]}).json()["error"]
    assert stops["message"].startswith("2 validation errors:") and stops["param"] == "body.stop"


def test_content_type_and_invalid_json(http: httpx.Client) -> None:
    r = http.post("/v1/chat/completions", content=b'{"messages": []}', headers={"content-type": "text/plain"})
    assert r.status_code == 400
    assert r.json() == bad(
        "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed",
        None,
        "Bad Request",
    )
    broken = http.post("/v1/chat/completions", content=b"{bad", headers={"content-type": "application/json"})
    assert broken.status_code == 400 and "json_invalid" in broken.json()["error"]["message"]


CASES: list[tuple[dict[str, Any], dict[str, Any]]] = [
    (
        {"stream_options": {"include_usage": True}},
        bad(
            "Stream options can only be defined when `stream=True`. (parameter=stream_options)",
            "stream_options",
        ),
    ),
    (
        {"continue_final_message": True, "add_generation_prompt": True},
        bad("Cannot set both `continue_final_message` and `add_generation_prompt` to True."),
    ),
    (
        {"top_logprobs": 3},
        bad(
            "when using `top_logprobs`, `logprobs` must be set to true. (parameter=top_logprobs)",
            "top_logprobs",
        ),
    ),
    (
        {"logprobs": True, "top_logprobs": -2},
        bad(
            "`top_logprobs` must be a positive value or -1. (parameter=top_logprobs, value=-2)",
            "top_logprobs",
        ),
    ),
    (
        {"logprobs": True, "top_logprobs": 21},
        bad(
            "Requested sample logprobs of 21, which is greater than max allowed: 20 "
            "(parameter=logprobs, value=21)",
            "logprobs",
        ),
    ),
    (
        {"prompt_logprobs": 1, "stream": True},
        bad(
            "`prompt_logprobs` are not available when `stream=True`. (parameter=prompt_logprobs)",
            "prompt_logprobs",
        ),
    ),
    (
        {"temperature": 2.5},
        bad("temperature must be in [0, 2], got 2.5. (parameter=temperature, value=2.5)", "temperature"),
    ),
    ({"temperature": 0, "n": 2}, bad("n must be 1 when using greedy sampling, got 2.")),
    ({"n": 0}, bad("n must be at least 1, got 0.")),
    ({"top_p": 0}, bad("top_p must be in (0, 1], got 0.0. (parameter=top_p)", "top_p")),
    ({"top_k": -3}, bad("top_k must be 0 (disable), or at least 1, got -3. (parameter=top_k)", "top_k")),
    ({"presence_penalty": 3}, bad("presence_penalty must be in [-2, 2], got 3.0.")),
    ({"repetition_penalty": 0}, bad("repetition_penalty must be greater than zero, got 0.0.")),
    ({"max_tokens": 0}, bad("max_tokens must be at least 1, got 0. (parameter=max_tokens)", "max_tokens")),
    (
        {"max_tokens": 5000},
        bad(
            "max_tokens=5000 cannot be greater than max_model_len=1024. Please request fewer output tokens. "
            "(parameter=max_tokens, value=5000)",
            "max_tokens",
        ),
    ),
    (
        {"min_tokens": 9, "max_tokens": 3},
        bad("min_tokens must be less than or equal to max_tokens=3, got 9."),
    ),
    ({"stop": ["a", ""]}, bad("stop cannot contain an empty string.")),
    ({"bad_words": [""]}, bad("bad_words cannot contain an empty string. Got bad_words=['']")),
    (
        {"logit_bias": {"x": 1}},
        bad(
            "logit_bias contains key(s) that cannot be converted to integer token IDs: ['x'] "
            "(parameter=logit_bias)",
            "logit_bias",
        ),
    ),
    (
        {"stop_token_ids": [99999]},
        bad(
            "token_id(s) [99999] in stop_token_ids contain out-of-vocab token ids. Vocabulary size: 260 "
            "(parameter=stop_token_ids)",
            "stop_token_ids",
        ),
    ),
    (
        {"allowed_token_ids": []},
        bad("allowed_token_ids is not None and empty! (parameter=allowed_token_ids)", "allowed_token_ids"),
    ),
    (
        {"priority": 5},
        bad("Got priority 5 but Priority scheduling is not enabled. (parameter=priority)", "priority"),
    ),
    (
        {"chat_template": "{{ messages }}"},
        bad(
            "Chat template is passed with request, but --trust-request-chat-template is not set. "
            "Refused request with untrusted chat template."
        ),
    ),
    (
        {"tools": []},
        bad(
            "`tools` must not be an empty array. Either provide at least one tool or omit the field "
            "entirely. (parameter=tools)",
            "tools",
        ),
    ),
    ({"tool_choice": "none", "tools": None}, None),
    (
        {"tool_choice": "required"},
        bad("When using `tool_choice`, `tools` must be set. (parameter=tool_choice)", "tool_choice"),
    ),
    (
        {"cache_salt": ""},
        bad(
            "Parameter 'cache_salt' must be a non-empty string if provided. (parameter=cache_salt)",
            "cache_salt",
        ),
    ),
    (
        {"logits_processors": ["os.system"]},
        bad(
            "Logits processor 'os.system' is not registered on this server; registered: ban_tokens, "
            "no_repeat_ngram. (parameter=logits_processors)",
            "logits_processors",
        ),
    ),
    (
        {"mm_processor_kwargs": {"a": 1}},
        bad(
            "Per-request mm_processor_kwargs are disabled by default: the served model takes text only. "
            "(parameter=mm_processor_kwargs)",
            "mm_processor_kwargs",
        ),
    ),
    (
        {"truncate_prompt_tokens": 5000},
        bad(
            "truncate_prompt_tokens=5000 cannot be greater than max_model_len = 1024. "
            "Please request a smaller truncation size."
        ),
    ),
]


@pytest.mark.parametrize(("extra", "expected"), CASES)
def test_bad_requests_answer_vllm_errors(http: httpx.Client, extra: dict[str, Any], expected: Any) -> None:
    r = post(http, {"messages": USER, "max_tokens": 2, **extra})
    if expected is None:
        assert r.status_code == 200, r.text
        return
    assert r.status_code == 400, r.text
    assert r.json() == expected


def test_too_long_prompts(http: httpx.Client) -> None:
    r = post(http, {"messages": USER * 300, "max_tokens": 2})
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["param"] == "input_tokens"
    assert error["message"].startswith(
        "This model's maximum context length is 1024 tokens. However, your prompt"
    )


def test_unknown_model_is_404(http: httpx.Client) -> None:
    for name in ("nope", "nope:step3", "wandb-artifact:///a/b/nope", "wandb-artifact:///broken"):
        r = post(http, {"messages": USER, "model": name})
        assert r.status_code == 404
        error = r.json()["error"]
        assert error["message"].startswith(f"The model `{name}` does not exist; served: toolkit/tiny-chat-1m")
        assert {**error, "message": ""} == bad("", "model", "NotFoundError", 404)["error"]


def test_missing_key_is_401(server: Any) -> None:
    with server.http(key="") as anonymous:
        assert post(anonymous, {"messages": USER}).status_code == 401
