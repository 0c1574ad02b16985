"""ChatCompare with tools: streamed tool calls joined by index, Python tools run and their results sent
back turn after turn, calls and results collapsed per model side by side (a scripted stream of the
official SDK's chunk types stands in for the server)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from openai.types.chat import ChatCompletionChunk

from toolkit.widgets import ChatCompare
from toolkit.widgets.chat_column import Step
from toolkit.widgets.conversation import message_html, tool_call_html, tool_result_html

CODES = {"abc": "417"}


def get(key: str) -> str:
    """Code of a key."""
    return CODES[key]


def chunk(delta: dict[str, Any], finish: str | None = None, index: int = 0) -> ChatCompletionChunk:
    return ChatCompletionChunk.model_validate(
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "m",
            "choices": [{"index": index, "delta": delta, "finish_reason": finish}],
        }
    )


def calling_stream(key: str) -> list[ChatCompletionChunk]:
    """A turn that calls ``get`` as OpenAI streams it: id, type and name first, arguments in pieces."""
    first = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get"}}
    return [
        chunk({"role": "assistant", "content": ""}),
        chunk({"tool_calls": [first]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"key": '}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": f'"{key}"}}'}}]}),
        chunk({}, "tool_calls"),
    ]


def answer_stream(text: str) -> list[ChatCompletionChunk]:
    return [
        chunk({"role": "assistant", "content": text[:1]}),
        chunk({"content": text[1:]}),
        chunk({}, "stop"),
    ]


class ScriptedStreams:
    """``client.chat.completions`` for ChatCompare: model "agent" calls then answers from the tool's
    result; model "plain" answers at once. Records every request."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.chat = self
        self.completions = self

    def create(
        self, *, messages: list[dict[str, Any]], model: str, stream: bool, **params: Any
    ) -> Iterator[Any]:
        self.requests.append({"model": model, "messages": json.loads(json.dumps(messages)), **params})
        results = [m["content"] for m in messages if m["role"] == "tool"]
        if model == "plain":
            return iter(answer_stream("no idea"))
        return iter(answer_stream(results[-1]) if results else calling_stream("abc"))


def test_python_tools_run_and_their_results_go_back_per_model_side_by_side() -> None:
    client = ScriptedStreams()
    compare = ChatCompare(client, models=["agent", "plain"], prompt="code abc", tools=[get], n=2)  # type: ignore[arg-type]
    columns = compare.run(wait=True)
    agent, plain = columns["agent"], columns["plain"]
    for sample in (0, 1):  # each sample is its own conversation
        assert agent.steps[sample] == [
            Step("call", '{"key": "abc"}', "get", "call_1"),
            Step("result", "417", "get", "call_1"),
        ]
        assert agent.texts[sample] == "417" and agent.finish[sample] == "stop"
    assert plain.steps == {} and plain.texts == {0: "no idea", 1: "no idea"}
    agent_requests = [r for r in client.requests if r["model"] == "agent"]
    assert len(agent_requests) == 4 and all(r["n"] == 1 for r in agent_requests)
    first, second = agent_requests[:2]
    assert first["tool_choice"] == "auto" and first["tools"][0]["function"]["name"] == "get"
    assert second["messages"][1:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get", "arguments": '{"key": "abc"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "417"},
    ]
    agent_html, plain_html = (view.value for view in compare.area.children)
    assert agent_html.count('class="tool-call"') == 2 and agent_html.count('class="tool-result"') == 2
    assert "<details" in agent_html and "<details open" not in agent_html  # collapsed
    assert "tool-call" not in plain_html
    df = compare.frame()
    assert df[["model", "sample", "text", "tool_calls"]].values.tolist() == [
        ["agent", 0, "417", 1],
        ["agent", 1, "417", 1],
        ["plain", 0, "no idea", 0],
        ["plain", 1, "no idea", 0],
    ]


def test_wire_tools_show_the_calls_without_running_them() -> None:
    client = ScriptedStreams()
    spec = {"type": "function", "function": {"name": "get", "parameters": {"type": "object"}}}
    compare = ChatCompare(client, models=["agent"], prompt="code abc", tools=[spec], tool_choice="required")  # type: ignore[arg-type]
    column = compare.run(wait=True)["agent"]
    assert len(client.requests) == 1 and client.requests[0]["tool_choice"] == "required"
    assert column.steps == {} and column.calls == {
        0: {0: {"id": "call_1", "name": "get", "arguments": '{"key": "abc"}'}}
    }
    assert column.finish == {0: "tool_calls"} and column.num_calls(0) == 1
    assert 'class="tool-call"' in compare.area.children[0].value


def test_tool_html_is_collapsed_json() -> None:
    call = tool_call_html("get", '{"key": "abc", "deep": {"x": [1, 2]}}')
    assert call.startswith('<details class="tool-call"') and "<b>get</b>" in call
    # Font Awesome's wrench, as on the buttons: an emoji (🔧) is an empty box without an emoji font
    assert '<summary><i class="fa fa-wrench" aria-hidden="true"></i> <b>get</b>' in call
    assert all(ord(c) < 0x1F000 for c in call + tool_result_html("417", "get"))
    assert (
        '<pre style="margin:0">{\n  &quot;key&quot;: &quot;abc&quot;,' in call
    )  # pretty-printed when opened
    result = tool_result_html("x" * 100, "get")
    assert "x" * 59 + "…" in result and "x" * 100 in result  # a one-line preview, the whole when opened
    assert "<pre" in tool_result_html("not json") and "not json" in tool_result_html("not json")
    messages = [
        {"role": "user", "content": "code abc"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "1", "function": {"name": "get", "arguments": {"key": "abc"}}}],
        },
        {"role": "tool", "tool_call_id": "1", "content": "417"},
    ]
    shown = "".join(message_html(m) for m in messages)
    assert "user: code abc" in shown and "assistant:" not in shown  # a calls-only turn
    assert shown.count('class="tool-call"') == 1 and shown.count('class="tool-result"') == 1
    compare = ChatCompare(None, messages=messages, tools=[get])  # type: ignore[arg-type]
    compare.run_settings = {"models": [], "messages": messages, "params": compare.params()}
    assert 'class="tool-result"' in compare.snapshot_html()


class NoiseStream(ScriptedStreams):
    """A random model's answer: thirty vertical tabs."""

    def create(
        self, *, messages: list[dict[str, Any]], model: str, stream: bool, **params: Any
    ) -> Iterator[Any]:
        return iter(answer_stream("\x0b" * 30))


def test_control_characters_stream_into_view_as_escapes() -> None:
    compare = ChatCompare(NoiseStream(), models=["random"], prompt="hi")  # type: ignore[arg-type]
    column = compare.run(wait=True)["random"]
    assert column.texts == {0: "\x0b" * 30}  # the text as it came
    view = compare.area.children[0].value
    assert "\\x0b" * 30 in view and "\x0b" not in view  # thirty visible escapes, not thirty blank lines
    assert compare.frame()["text"].tolist() == ["\\x0b" * 30]
