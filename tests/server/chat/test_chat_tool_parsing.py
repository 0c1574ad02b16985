"""Unit tests of reading tool calls back from text (whole and streamed) and of the request side:
history for the template, the call form a template writes, bounded schemas, the constraint regex."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from toolkit.server.chat.tool_calls import CanonicalJson, ToolCallStream, parse_tool_calls
from toolkit.server.chat.tools import (
    DEFAULT_FORM,
    FLAT_OBJECT,
    SCALAR,
    CallForm,
    ToolUse,
    bounded,
    call_constraint,
    call_form,
    literal,
    template_messages,
)
from toolkit.server.engine.fetched import SMOLLM2
from toolkit.server.engine.structured import CompileTimeout
from toolkit.server.engine.tokenizer import CHATML_TEMPLATE
from toolkit.server.errors import BadRequest
from toolkit.types.chat import ChatTool

ID = re.compile(r"chatcmpl-tool-[0-9a-f]{16}")


def calls_of(text: str) -> list[tuple[str, str]]:
    return [(c.function.name, c.function.arguments) for c in parse_tool_calls(text)[1]]


def test_calls_content_and_ids_as_vllm_hermes_reads_them() -> None:
    text = 'Let me look.\n<tool_call>\n{"name": "w", "arguments": {"city": "Zürich"}}\n</tool_call>'
    text += '\n<tool_call>{"name": "t", "arguments": {}}</tool_call>'
    content, calls = parse_tool_calls(text)
    assert content == "Let me look.\n"
    assert [(c.function.name, c.function.arguments, c.type) for c in calls] == [
        ("w", '{"city": "Zürich"}', "function"),
        ("t", "{}", "function"),
    ]
    assert all(ID.fullmatch(c.id or "") for c in calls) and calls[0].id != calls[1].id
    assert parse_tool_calls('<tool_call>{"name": "w", "arguments": {"a":1}}</tool_call>')[0] is None


def test_arguments_are_re_encoded_and_an_unclosed_last_call_counts() -> None:
    assert calls_of('<tool_call>{"name": "f", "arguments": {"a":"\\u00e9", "b" : 1E2}}') == [
        ("f", '{"a": "é", "b": 100.0}')
    ]


@pytest.mark.parametrize(
    "text",
    [
        "no calls at all",
        "<tool_call>{not json}</tool_call>",
        '<tool_call>{"arguments": {}}</tool_call>',  # no name
        '<tool_call>{"name": "f"}</tool_call>',  # no arguments
        '<tool_call>["f", {}]</tool_call>',
        'ok <tool_call>{"name": "f", "arguments": {}}</tool_call><tool_call>{"name": 3, "arguments": {}}',
    ],
)
def test_a_malformed_call_leaves_the_whole_text_as_content(text: str) -> None:
    assert parse_tool_calls(text) == (text, [])


def stream(text: str, size: int) -> tuple[str, list[dict[str, Any]]]:
    """``text`` pushed ``size`` characters at a time, accumulated as the openai SDK does (checking
    each chunk has one delta per call and that id, type and name come once, first)."""
    parser, content, calls = ToolCallStream(), "", []
    pieces = [text[i : i + size] for i in range(0, len(text), size)] + [""]
    for n, piece in enumerate(pieces):
        out, deltas = parser.push(piece, final=n == len(pieces) - 1)
        content += out
        assert len({d.index for d in deltas}) == len(deltas)
        for d in deltas:
            fields = d.model_dump(exclude_unset=True)
            if d.index == len(calls):
                assert set(fields) == {"index", "id", "type", "function"} and "name" in fields["function"]
                calls.append({"id": d.id, "name": fields["function"]["name"], "arguments": ""})
            else:
                assert set(fields) == {"index", "function"} and set(fields["function"]) == {"arguments"}
            calls[d.index]["arguments"] += fields["function"].get("arguments", "")
    return content, calls


CALLS = [
    'Sure.<tool_call>{"name": "w", "arguments": {"city" :"Par\\u00eds", "n": -0.50, "x": [1, true, null]}}'
    '</tool_call><tool_call>{"arguments": {"a": {}}, "name": "late"}</tool_call>',
    '<tool_call>\n{"name": "f", "arguments": {"s": "a \\"q\\" </b>", "e": 1e3}}\n</tool_call>\n'
    '<tool_call>\n{"name": "g", "arguments": {"big": 12345678901234567890}}',
    "plain text that ends in a partial tag <tool_c",
    "text <tool_call>{broken</tool_call> more",
]


def test_a_malformed_block_goes_out_only_if_its_name_was_sent_before_it_ended() -> None:
    text = 'ok <tool_call>{"name": "f", "arguments": {"a": 1 oops}}</tool_call>'
    assert parse_tool_calls(text) == (text, [])
    assert stream(text, len(text)) == (text, [])  # seen whole: text, as in the whole response
    content, [call] = stream(text, 1)  # its name streamed before the block ended
    assert content == "ok " and (call["name"], call["arguments"]) == ("f", '{"a": 1')


@pytest.mark.parametrize("text", CALLS)
@pytest.mark.parametrize("size", [1, 2, 5, 1000])
def test_a_stream_reassembles_the_whole_reading(text: str, size: int) -> None:
    content, calls = parse_tool_calls(text)
    streamed_content, streamed = stream(text, size)
    assert [(c["name"], c["arguments"]) for c in streamed] == [
        (c.function.name, c.function.arguments) for c in calls
    ]
    assert streamed_content == (content or "")
    assert all(ID.fullmatch(c["id"]) for c in streamed)


def test_a_stream_sends_arguments_as_they_complete_and_holds_back_a_partial_tag() -> None:
    parser = ToolCallStream()
    assert parser.push("Hi <tool_") == ("Hi ", [])
    content, deltas = parser.push('call>{"name": "f", "arguments": {"a"')
    first = deltas[0].model_dump(exclude_unset=True)
    assert content == "" and first["function"] == {"name": "f", "arguments": '{"a"'}
    assert first["type"] == "function" and ID.fullmatch(first["id"])
    content, deltas = parser.push(': 1, "b": 2')  # the 2 may go on
    assert [d.model_dump(exclude_unset=True) for d in deltas] == [
        {"index": 0, "function": {"arguments": ': 1, "b": '}}
    ]
    assert [d.model_dump(exclude_unset=True) for d in parser.push("}}</tool_call>")[1]] == [
        {"index": 0, "function": {"arguments": "2}"}}
    ]


def test_canonical_json_matches_json_dumps() -> None:
    raw = '{ "a":[1,2.50 ,{"b":"\\/x\\u00e9"}], "c" : null, "d":-1E-2, "e": "x\\ny", "f": {} }'
    encoder = CanonicalJson()
    out = "".join(encoder.feed(ch) for ch in raw)
    assert encoder.done and out == json.dumps(json.loads(raw), ensure_ascii=False)
    assert CanonicalJson().feed('{"a": 1}} and the rest') == '{"a": 1}'
    broken = CanonicalJson()
    assert broken.feed("{@") == "{" and broken.failed


def test_history_arguments_become_objects_for_the_template() -> None:
    messages = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}},
                {"id": "2", "type": "function", "function": {"name": "g", "arguments": ""}},
            ],
        },
        {"role": "tool", "tool_call_id": "1", "content": "ok"},
    ]
    out = template_messages(messages)
    assert [c["function"]["arguments"] for c in out[1]["tool_calls"]] == [{"a": 1}, {}]
    assert messages[1]["tool_calls"][0]["function"]["arguments"] == '{"a": 1}'  # not modified
    assert out[0] is messages[0] and out[2] is messages[2]
    bad = [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{nope"}}]}]
    where = r"messages\[0\]\.tool_calls\[0\]"
    with pytest.raises(BadRequest, match=where + r"\.function\.arguments is not valid JSON"):
        template_messages(bad)
    with pytest.raises(BadRequest, match=where + " must be"):
        template_messages([{"role": "assistant", "tool_calls": [{"function": "f"}]}])


QWEN_LIKE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content or '' }}"
    "{% for c in m.tool_calls or [] %}{{ '\\n' }}<tool_call>\n"
    '{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}\n</tool_call>'
    "{% endfor %}<|im_end|>\n{% endfor %}{% if tools %}{{ tools | length }}{% endif %}"
)


def test_the_call_form_is_read_from_the_template() -> None:
    assert call_form(CHATML_TEMPLATE) == CallForm("<tool_call>", "</tool_call>", "", True)
    assert call_form(QWEN_LIKE) == CallForm("<tool_call>\n", "\n</tool_call>", "\n", True)
    # SmolLM2's tools template shows the call form in its system turn: the call is read after the user's turn
    assert call_form(SMOLLM2.chat_template()) == CallForm("<tool_call>", "</tool_call>", "", True)
    assert call_form("{% for m in messages %}{{ m.content }}{% endfor %}") == DEFAULT_FORM
    assert call_form("{{ raise_exception('no') }}") == DEFAULT_FORM
    assert CallForm(spaced=False).head("f") == '{"name":"f","arguments":'


def test_unrestricted_schemas_are_bounded() -> None:
    assert bounded({"type": "object"}) == FLAT_OBJECT
    assert bounded({}) == FLAT_OBJECT
    assert bounded({"type": "object", "additionalProperties": False}) == {
        "type": "object",
        "additionalProperties": False,
    }
    nested = bounded(
        {
            "type": "object",
            "properties": {
                "o": {"type": "object"},
                "l": {"type": "array"},
                "any": {},
                "s": {"type": "string"},
            },
            "$defs": {"D": {"anyOf": [{"type": "object"}, {"type": "integer"}]}},
        }
    )
    assert nested["properties"] == {
        "o": FLAT_OBJECT,
        "l": {"type": "array", "items": SCALAR},
        "any": SCALAR,
        "s": {"type": "string"},
    }
    assert nested["$defs"]["D"]["anyOf"] == [FLAT_OBJECT, {"type": "integer"}]


def test_small_integer_ranges_become_enums() -> None:
    assert bounded({"type": "integer", "minimum": 1, "maximum": 3, "description": "d"}, False) == {
        "description": "d",
        "enum": [1, 2, 3],
    }
    assert bounded({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 2.5}, False) == {
        "enum": [1, 2]
    }
    wide = {"type": "integer", "minimum": 0, "maximum": 10**6}
    assert (
        bounded(wide, False) == wide
        and bounded({"type": "integer", "minimum": 0}, False)["type"] == "integer"
    )


def test_literal_escapes_regex_syntax() -> None:
    text = '<tool_call>\n{"a": [1.5]} (x|y)* $^ & ~ - #\t'
    assert re.fullmatch(literal(text), text)


def test_finish_reason_follows_vllm() -> None:
    assert ToolUse("auto").finish_reason("stop", True) == "tool_calls"
    assert ToolUse("required").finish_reason("length", True) == "length"
    assert ToolUse("auto").finish_reason("stop", False) == "stop"
    assert ToolUse("function", "f").finish_reason("stop", True) == "stop"


class SlowCompiler:
    """A compiler that runs out of time on any regex mentioning ``slow``."""

    def index(self, regex: str) -> str:
        if "slow" in regex:
            raise CompileTimeout("The structured output constraint took longer than 10s to compile.")
        return regex


def test_a_constraint_that_compiles_too_slowly_is_a_400_naming_the_tools() -> None:
    tools = [
        ChatTool.model_validate({"function": {"name": name, "parameters": {"type": "object"}}})
        for name in ("fast", "slow")
    ]
    with pytest.raises(BadRequest) as caught:
        call_constraint(DEFAULT_FORM, tools, ToolUse("required"), True, SlowCompiler())  # type: ignore[arg-type]
    assert caught.value.param == "tools" and "tools `fast`, `slow`" in str(caught.value.detail)
    assert "longer than 10s" in str(caught.value.detail)
    first, then = call_constraint(DEFAULT_FORM, tools, ToolUse("function", "fast"), True, SlowCompiler())  # type: ignore[arg-type]
    assert then is None and "fast" in first and "slow" not in first
