"""Tool calling on the built-in model through the official ``openai`` client: ``required`` and named
choices (constrained to calls of the tools' schemas), streams the SDK reassembles, logprobs and token
ids over the call tokens, history with calls and results, and every error in vLLM's shape."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import openai
import pytest
from openai.types.chat import ChatCompletion

from conftest import LocalServer
from toolkit.server.chat.tool_calls import parse_tool_calls
from toolkit.server.chat.tools import FLAT_OBJECT
from toolkit.server.engine.codec import Codec
from toolkit.server.engine.model import RANDOM_NAME
from toolkit.server.engine.tokenizer import byte_tokenizer

USER = [{"role": "user", "content": "Weather in Paris?"}]
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "unit": {"enum": ["c", "f"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city"],
    "additionalProperties": False,
}
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "Forecast.", "parameters": WEATHER},
    },
    {"type": "function", "function": {"name": "now"}},  # no parameters
    {"type": "function", "function": {"name": "note", "parameters": {"type": "object"}}},  # any object
]
SCHEMAS = {"get_weather": WEATHER, "now": {"type": "object", "maxProperties": 0}, "note": FLAT_OBJECT}
SHORT_STRINGS = {"34": 3.0}
"""``logit_bias`` on ``"``: the random built-in model's strings end sooner (it writes a few hundred
bytes otherwise), so its calls fit in ``max_tokens``."""
CALL_ID = re.compile(r"chatcmpl-tool-[0-9a-f]{16}")
CODEC = Codec(byte_tokenizer())


@pytest.fixture(scope="module")
def server(random_server: LocalServer) -> LocalServer:
    """The random-init model's server: the checks of the decoding need its spread-out choices
    (parallel calls, different tools across ``n``); the pre-trained model's are peaked."""
    return random_server


@pytest.fixture(scope="module")
def client(server: LocalServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key=server.key, max_retries=0) as c:
        yield c


def create(client: openai.OpenAI, **kwargs: Any) -> ChatCompletion:
    body = {"model": RANDOM_NAME, "messages": USER, "tools": TOOLS, "max_tokens": 400}
    body |= {"logit_bias": SHORT_STRINGS, **kwargs}
    return client.chat.completions.create(**body)  # type: ignore[no-any-return]


def calls(completion: ChatCompletion, index: int = 0) -> list[tuple[str, str]]:
    message = completion.choices[index].message
    return [(c.function.name, c.function.arguments) for c in message.tool_calls or []]  # type: ignore[union-attr]


def assert_valid(name: str, arguments: str) -> None:
    jsonschema.validate(json.loads(arguments), SCHEMAS[name])


def test_required_gives_calls_that_match_their_tools_schemas(client: openai.OpenAI) -> None:
    completion = create(client, tool_choice="required", n=8, seed=1)
    ids = []
    for choice in completion.choices:
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        assert choice.message.tool_calls
        for call in choice.message.tool_calls:
            assert call.type == "function" and CALL_ID.fullmatch(call.id)
            assert_valid(call.function.name, call.function.arguments)  # type: ignore[union-attr]
            ids.append(call.id)
    assert len(set(ids)) == len(ids)
    per_choice = [calls(completion, i) for i in range(8)]
    assert len({json.dumps(c) for c in per_choice}) > 1  # n choices are independent
    assert max(len(c) for c in per_choice) > 1  # parallel calls by default
    assert len({name for c in per_choice for name, _ in c}) > 1


def test_parallel_tool_calls_false_gives_one_call(client: openai.OpenAI) -> None:
    completion = create(client, tool_choice="required", n=8, seed=1, parallel_tool_calls=False)
    assert all(len(calls(completion, i)) == 1 for i in range(8))


def test_a_named_choice_calls_that_function_and_stops(client: openai.OpenAI) -> None:
    named = {"type": "function", "function": {"name": "get_weather"}}
    completion = create(client, tool_choice=named, n=4, seed=2)
    for i, choice in enumerate(completion.choices):
        assert choice.finish_reason == "stop"  # vLLM's finish reason for a named choice
        [(name, arguments)] = calls(completion, i)
        assert name == "get_weather"
        assert_valid(name, arguments)
    assert (
        create(client, tool_choice={"type": "function", "function": {"name": "now"}}, seed=2)
        .choices[0]
        .message.tool_calls[0]
        .function.arguments
        == "{}"
    )  # type: ignore[index, union-attr]


@pytest.mark.parametrize(
    ("tool_choice", "finish_reason"),
    [("required", "tool_calls"), ({"type": "function", "function": {"name": "get_weather"}}, "stop")],
)
def test_the_sdk_stream_reassembles_the_same_calls(
    client: openai.OpenAI, tool_choice: Any, finish_reason: str
) -> None:
    kwargs: dict[str, Any] = {"model": RANDOM_NAME, "messages": USER, "tools": TOOLS, "max_tokens": 400}
    kwargs |= {"tool_choice": tool_choice, "n": 3, "seed": 5, "logit_bias": SHORT_STRINGS}
    whole = client.chat.completions.create(**kwargs)
    with client.chat.completions.stream(**kwargs, stream_options={"include_usage": True}) as stream:
        streamed = stream.get_final_completion()
    assert [c.finish_reason for c in streamed.choices] == [c.finish_reason for c in whole.choices]
    assert {c.finish_reason for c in whole.choices} == {finish_reason}
    assert [calls(streamed, i) for i in range(3)] == [calls(whole, i) for i in range(3)]  # type: ignore[arg-type]
    assert all(c.message.content in ("", None) for c in streamed.choices)
    assert streamed.usage is not None and whole.usage is not None
    assert streamed.usage.total_tokens == whole.usage.total_tokens


def sse(http: httpx.Client, body: dict[str, Any]) -> list[dict[str, Any]]:
    with http.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def test_stream_chunks_send_id_type_and_name_once_then_argument_fragments(http: httpx.Client) -> None:
    body = {"messages": USER, "tools": TOOLS, "tool_choice": "required", "seed": 3, "max_tokens": 400}
    body |= {"logprobs": True, "return_token_ids": True, "logit_bias": SHORT_STRINGS}
    whole = http.post("/v1/chat/completions", json=body).json()["choices"][0]
    chunks = sse(http, {**body, "stream": True})
    pieces: dict[int, list[dict[str, Any]]] = {}
    for chunk in chunks[1:]:
        [choice] = chunk["choices"]
        assert len(choice["logprobs"]["content"]) == len(choice["token_ids"])  # every token, every chunk
        assert "content" not in choice["delta"]
        for delta in choice["delta"].get("tool_calls", []):
            pieces.setdefault(delta["index"], []).append(delta)
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert sum(len(c["choices"][0]["token_ids"]) for c in chunks[1:]) == len(whole["token_ids"])
    expected = whole["message"]["tool_calls"]
    assert sorted(pieces) == list(range(len(expected)))
    for index, deltas in pieces.items():
        first, rest = deltas[0], deltas[1:]
        assert set(first) == {"index", "id", "type", "function"} and first["type"] == "function"
        assert (
            CALL_ID.fullmatch(first["id"])
            and first["function"]["name"] == expected[index]["function"]["name"]
        )
        assert all(set(d) == {"index", "function"} and set(d["function"]) == {"arguments"} for d in rest)
        fragments = [first["function"].get("arguments", "")] + [d["function"]["arguments"] for d in rest]
        assert "".join(fragments) == expected[index]["function"]["arguments"]
        assert len(fragments) > 2  # sent as they were generated, not at the end


def test_logprobs_and_token_ids_cover_the_call_tokens(client: openai.OpenAI) -> None:
    completion = create(
        client,
        tool_choice="required",
        n=2,
        seed=4,
        logprobs=True,
        top_logprobs=2,
        extra_body={"return_token_ids": True},
    )
    assert completion.usage is not None
    total = 0
    for i, choice in enumerate(completion.choices):
        ids: list[int] = choice.token_ids  # type: ignore[attr-defined]
        assert choice.logprobs is not None and choice.logprobs.content is not None
        assert len(choice.logprobs.content) == len(ids) and ids[-1] == CODEC.encode("<|im_end|>")[0]
        text = CODEC.decode(ids[:-1])
        assert text.startswith('<tool_call>{"name": ') and text.endswith("}</tool_call>")
        assert [(c.function.name, c.function.arguments) for c in parse_tool_calls(text)[1]] == calls(
            completion, i
        )
        assert "".join(t.token for t in choice.logprobs.content[:-1]) == text
        total += len(ids)
    assert total == completion.usage.completion_tokens


def test_history_with_calls_and_results_renders_through_the_template(http: httpx.Client) -> None:
    history = [
        *USER,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "a",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                },
                {"id": "b", "type": "function", "function": {"name": "now", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "18C"},
        {"role": "tool", "tool_call_id": "b", "content": "noon"},
    ]
    body = {"messages": history, "tools": TOOLS, "max_tokens": 1, "return_token_ids": True}
    r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    prompt = CODEC.decode(r.json()["prompt_token_ids"], skip_special_tokens=False, spaces_between=False)
    assert prompt == (
        "<|im_start|>system\n# Tools\n"
        'get_weather(city: string, unit?: "c"|"f", days?: integer)\nnow()\nnote()<|im_end|>\n'
        "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
        "<|im_start|>assistant\n"
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
        '<tool_call>{"name": "now", "arguments": {}}</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>18C</tool_response><tool_response>noon</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_a_response_message_goes_back_into_the_history(client: openai.OpenAI) -> None:
    first = create(client, tool_choice="required", seed=6)
    message = first.choices[0].message
    assert message.tool_calls
    results = [{"role": "tool", "tool_call_id": c.id, "content": "done"} for c in message.tool_calls]
    history = [*USER, message.model_dump(exclude_none=True), *results]
    second = create(client, messages=history, tool_choice="none", seed=6, max_tokens=5)
    assert second.choices[0].message.tool_calls is None and second.choices[0].finish_reason == "length"


def test_auto_reads_no_call_from_text_without_one(client: openai.OpenAI) -> None:
    completion = create(client, seed=7, max_tokens=20)  # tools without tool_choice: "auto"
    choice = completion.choices[0]
    assert choice.message.tool_calls is None and choice.finish_reason in ("stop", "length")
    assert choice.message.content and "<tool_call>" not in choice.message.content


def bad(message: str, param: str | None, type_: str = "BadRequestError") -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": 400}}


WEATHER_TOOL = [TOOLS[0]]
BROKEN = {
    "type": "function",
    "function": {"name": "broken", "parameters": {"type": "object", "properties": {"x": {"type": "nope"}}}},
}
BAD_PATTERN = {
    "type": "function",
    "function": {
        "name": "pattern",
        "parameters": {"type": "object", "properties": {"x": {"type": "string", "pattern": "("}}},
    },
}
ERRORS: list[tuple[dict[str, Any], dict[str, Any]]] = [
    (
        {"tools": WEATHER_TOOL, "tool_choice": {"type": "function", "function": {"name": "other"}}},
        bad(
            "The tool specified in `tool_choice` does not match any of the specified `tools` "
            "(parameter=tool_choice)",
            "tool_choice",
        ),
    ),
    (
        {"tools": WEATHER_TOOL, "tool_choice": "sometimes"},
        bad(
            'Invalid value for `tool_choice`: sometimes! Only named tools, "none", "auto" or "required" are '
            "supported. (parameter=tool_choice)",
            "tool_choice",
        ),
    ),
    (
        {"tools": [*WEATHER_TOOL, BROKEN], "tool_choice": "required"},
        bad(
            "The parameters schema of tool `broken` cannot be compiled into a tool-call constraint: "
            "Invalid JSON grammar specification. Unsupported type: nope (parameter=tools)",
            "tools",
        ),
    ),
    (
        {"tools": [*WEATHER_TOOL, BAD_PATTERN], "tool_choice": "required"},
        {"param": "tools", "contains": "`pattern`"},
    ),
    (
        {"tools": WEATHER_TOOL, "tool_choice": "required", "structured_outputs": {"regex": "a+"}},
        bad("You can only either use constraints for structured outputs or tools, not both.", None),
    ),
    (
        {
            "tools": WEATHER_TOOL,
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "response_format": {"type": "json_object"},
        },
        bad("You can only either use constraints for structured outputs or tools, not both.", None),
    ),
    (
        {"tools": WEATHER_TOOL, "tool_choice": "required", "use_beam_search": True, "n": 2},
        bad("Beam search cannot be constrained to tool calls. (parameter=tool_choice)", "tool_choice"),
    ),
    (
        {
            "tools": WEATHER_TOOL,
            "messages": [
                *USER,
                {
                    "role": "assistant",
                    "tool_calls": [
                        {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{x"}}
                    ],
                },
            ],
        },
        {"param": "messages", "contains": "messages[1].tool_calls[0].function.arguments is not valid JSON"},
    ),
    (
        {"tools": [{"type": "function", "function": {"description": "no name"}}]},
        {"param": "body.tools.0.function.name", "contains": "'type': 'missing'"},
    ),
]


@pytest.mark.parametrize(("extra", "expected"), ERRORS)
def test_bad_tool_requests_answer_400_in_vllms_shape(
    server: LocalServer, http: httpx.Client, extra: dict[str, Any], expected: dict[str, Any]
) -> None:
    before = http.get("/v1/usage").json()["data"]
    r = http.post("/v1/chat/completions", json={"messages": USER, "max_tokens": 5, **extra})
    assert r.status_code == 400, r.text
    if "error" in expected:
        assert r.json() == expected
    else:
        error = r.json()["error"]
        assert error["param"] == expected["param"] and expected["contains"] in error["message"]
    assert http.get("/v1/usage").json()["data"] == before  # nothing recorded


def test_the_toolkit_client_reads_tool_calls_whole_and_streamed(server: LocalServer) -> None:
    kwargs: dict[str, Any] = {"messages": USER, "tools": TOOLS, "tool_choice": "required", "seed": 8}
    kwargs |= {"max_tokens": 400, "logit_bias": SHORT_STRINGS, "logprobs": True, "return_token_ids": True}
    client = server.client()
    whole = client.chat.completions.create(**kwargs)
    choice = whole.trainable_choice(0)  # what a trajectory carries: the calls and their tokens
    assert choice.message.tool_calls and choice.token_ids and choice.logprobs is not None
    assert choice.finish_reason == "tool_calls"
    arguments: dict[int, str] = {}
    for chunk in client.chat.completions.create(**kwargs, stream=True):
        for c in chunk.choices:
            for delta in c.delta.tool_calls or []:
                fragment = delta.function.arguments if delta.function else None
                arguments[delta.index] = arguments.get(delta.index, "") + (fragment or "")
    expected = [c.function.arguments for c in choice.message.tool_calls]
    assert [arguments[i] for i in sorted(arguments)] == expected
