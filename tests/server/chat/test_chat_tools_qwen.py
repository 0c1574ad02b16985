"""Tool calling on a Qwen-style model folder served with ``--base-model``: a small Qwen3 config, a
byte tokenizer with Qwen's ChatML special tokens and its ``<tool_call>`` text tokens, and a Qwen3-style
tool template written here from the facts of spec/agents.md section 5.

The folder's weights are random except for the output layer, set so that the model writes one fixed
answer by itself: ``Let me check.`` and two calls in Qwen's form. So ``auto`` (free generation, then
parsing) is tested on a model that really calls tools; ``required`` and named choices are
constrained as on any model.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import openai
import pytest
import torch
from outlines_core import Guide
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from conftest import LocalServer
from toolkit.server.chat.tools import CallForm, call_form, literal
from toolkit.server.engine.codec import Codec
from toolkit.server.engine.structured import Compiler
from toolkit.server.engine.tokenizer import bytes_to_unicode

QWEN3_TOOLS_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou can call the functions below to help with the request.\\n\\n'"
    " + 'Their signatures are listed inside <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nTo call a function, write a JSON object with its name and arguments inside '"
    " + '<tool_call></tool_call> XML tags:\\n<tool_call>\\n'"
    ' + \'{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n\' }}'
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'system' and loop.first %}"
    "{%- elif message.role in ('user', 'system') %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant' }}"
    "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for call in message.tool_calls or [] %}"
    "{%- set f = call.function if call.function is defined else call %}"
    '{{- \'\\n<tool_call>\\n{"name": "\' + f.name + \'", "arguments": \' }}'
    "{%- if f.arguments is string %}{{- f.arguments }}{%- else %}{{- f.arguments | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
QWEN_TEXT_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
CHECKING = "Let me check.\n"
WEATHER_CALL = '\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n'
TIME_CALL = '\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
ANSWER = f"{CHECKING}<tool_call>{WEATHER_CALL}</tool_call>{TIME_CALL}"
"""What the model writes: each piece below is one token, and each token names the next one."""
CHAIN = ["\n", CHECKING, "<tool_call>", WEATHER_CALL, "</tool_call>", TIME_CALL, "<|im_end|>"]
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Forecast for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "enum": ["Paris", "Oslo"]},
                    "days": {"type": "integer"},
                },
                "required": ["city", "days"],
            },
        },
    },
    {
        "type": "function",
        "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
    },
]
USER = [{"role": "user", "content": "Weather in Paris?"}]


def qwen_tokenizer() -> Tokenizer:
    """Byte-level BPE (no merges) with Qwen's ChatML special tokens and its tool tags as text tokens,
    plus the pieces of :data:`ANSWER` as text tokens."""
    byte_to_char = bytes_to_unicode()
    tok = Tokenizer(models.BPE(vocab={byte_to_char[b]: b for b in range(256)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIAL)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in QWEN_TEXT_TOKENS])
    tok.add_tokens(
        [AddedToken(t, special=False, normalized=False) for t in (CHECKING, WEATHER_CALL, TIME_CALL)]
    )
    return tok


CODEC = Codec(qwen_tokenizer())


def caller_model(tok: Tokenizer) -> Qwen3ForCausalLM:
    """A one-layer Qwen3 whose attention and MLP add nothing, so each position's logits depend on its
    own token only; the output layer maps each token of :data:`CHAIN` to the next one."""
    vocab = tok.get_vocab_size()
    config = Qwen3Config(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=tok.token_to_id("<|im_end|>"),
        pad_token_id=tok.token_to_id("<|endoftext|>"),
    )
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config)
    ids = [tok.encode(piece).ids for piece in CHAIN]
    assert all(len(i) == 1 for i in ids), ids
    with torch.no_grad():
        layer = model.model.layers[0]
        layer.self_attn.o_proj.weight.zero_()
        layer.mlp.down_proj.weight.zero_()
        embed = model.model.embed_tokens.weight
        head = model.lm_head.weight
        head.zero_()
        for (current,), (following,) in pairwise(ids):
            head[following] = 6.0 * embed[current] / embed[current].norm()
    return model


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("qwen") / "qwen3-caller"
    tok = qwen_tokenizer()
    caller_model(tok).save_pretrained(path)
    tok.save(str(path / "tokenizer.json"))
    (path / "chat_template.jinja").write_text(QWEN3_TOOLS_TEMPLATE)
    return path


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory, folder: Path) -> Iterator[LocalServer]:
    args = ("--base-model", str(folder), "--trust-request-chat-template")
    srv = LocalServer(Path(tmp_path_factory.mktemp("qwen-server")), extra_args=args).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(qwen: LocalServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{qwen.url}/v1", api_key=qwen.key, max_retries=0) as c:
        yield c


def calls(message: Any) -> list[tuple[str, str]]:
    return [(c.function.name, c.function.arguments) for c in message.tool_calls or []]


def test_auto_reads_the_calls_the_model_writes(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model="qwen3-caller",
        messages=USER,
        tools=TOOLS,
        seed=0,
        extra_body={"return_token_ids": True},  # type: ignore[arg-type]
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == CHECKING
    assert calls(choice.message) == [("get_weather", '{"city": "Paris", "days": 2}'), ("get_time", "{}")]
    assert len(choice.token_ids) == len(CHAIN) - 1  # type: ignore[attr-defined]


def test_the_sdk_stream_of_auto_reassembles_content_and_calls(client: openai.OpenAI) -> None:
    with client.chat.completions.stream(
        model="qwen3-caller",
        messages=USER,  # type: ignore[arg-type]
        tools=TOOLS,  # type: ignore[arg-type]
        seed=0,
        stream_options={"include_usage": True},
    ) as stream:
        final = stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == CHECKING
    assert calls(choice.message) == [("get_weather", '{"city": "Paris", "days": 2}'), ("get_time", "{}")]
    assert final.usage is not None and final.usage.completion_tokens == len(CHAIN) - 1


def test_none_leaves_the_calls_in_the_text(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model="qwen3-caller",
        messages=USER,  # type: ignore[arg-type]
        tools=TOOLS,  # type: ignore[arg-type]
        tool_choice="none",
        seed=0,
    )
    choice = completion.choices[0]
    assert choice.message.tool_calls is None and choice.finish_reason == "stop"
    assert choice.message.content == ANSWER


def test_required_and_named_write_qwens_call_form(client: openai.OpenAI) -> None:
    for tool_choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        completion = client.chat.completions.create(
            model="qwen3-caller",
            messages=USER,  # type: ignore[arg-type]
            tools=TOOLS,  # type: ignore[arg-type]
            tool_choice=tool_choice,  # type: ignore[arg-type]
            n=4,
            seed=1,
            max_tokens=300,
            extra_body={"return_token_ids": True},
        )
        for choice in completion.choices:
            assert choice.message.tool_calls and choice.message.content is None
            text = CODEC.decode(choice.token_ids[:-1])  # type: ignore[attr-defined]
            blocks = text.split("\n<tool_call>")
            assert blocks[0].startswith("<tool_call>\n{") and all(
                b.endswith("}\n</tool_call>") for b in blocks
            )
            for name, arguments in calls(choice.message):
                value = json.loads(arguments)
                assert (
                    name in ("get_weather", "get_time")
                    if tool_choice == "required"
                    else name == "get_weather"
                )
                assert value == {} if name == "get_time" else value["city"] in ("Paris", "Oslo")
        if tool_choice != "required":
            assert all(
                c.finish_reason == "stop" and len(c.message.tool_calls or []) == 1 for c in completion.choices
            )


def test_the_tool_call_token_is_in_the_constraints_vocabulary() -> None:
    """A constraint can produce ``<tool_call>`` as the one token Qwen writes, not only as bytes."""
    compiler = Compiler(CODEC, CODEC.tok.token_to_id("<|im_end|>"))
    allowed = Guide(compiler.index(literal("<tool_call>\n"))).get_tokens()
    assert CODEC.tok.token_to_id("<tool_call>") in allowed and ord("<") in allowed
    compiler.close()
    assert call_form(QWEN3_TOOLS_TEMPLATE) == CallForm("<tool_call>\n", "\n</tool_call>", "\n", True)


def test_history_renders_as_transformers_renders_it(qwen: LocalServer) -> None:
    """Arguments sent as JSON strings reach the template as objects, as vLLM hands them over."""
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief."},
        *USER,
        {
            "role": "assistant",
            "content": CHECKING.strip(),
            "tool_calls": [
                {
                    "id": "a",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris","days":2}'},
                },
                {"id": "b", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "18C"},
        {"role": "tool", "tool_call_id": "b", "content": "noon"},
    ]
    with qwen.http() as http:
        r = http.post(
            "/v1/chat/completions",
            json={"messages": history, "tools": TOOLS, "max_tokens": 1, "return_token_ids": True},
        )
    assert r.status_code == 200, r.text
    as_objects = json.loads(json.dumps(history))
    for call in as_objects[2]["tool_calls"]:
        call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    reference = PreTrainedTokenizerFast(tokenizer_object=qwen_tokenizer())
    text = reference.apply_chat_template(
        as_objects,
        tools=TOOLS,
        chat_template=QWEN3_TOOLS_TEMPLATE,
        tokenize=False,
        add_generation_prompt=True,
    )
    assert '{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}' in text
    assert r.json()["prompt_token_ids"] == reference.encode(text, add_special_tokens=False)


def test_a_template_that_ignores_tools_is_a_400_naming_the_model(qwen: LocalServer) -> None:
    plain = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    with qwen.http() as http:
        for choice in ("auto", "required"):
            r = http.post(
                "/v1/chat/completions",
                json={"messages": USER, "tools": TOOLS, "tool_choice": choice, "chat_template": plain},
            )
            assert r.status_code == 400
            assert r.json()["error"] == {
                "message": "The chat template of model `qwen3-caller` does not render `tools`, so the "
                "model cannot call them: serve a model whose template supports tools, or send "
                '`tool_choice: "none"`. (parameter=tools)',
                "type": "BadRequestError",
                "param": "tools",
                "code": 400,
            }
        fine = http.post(
            "/v1/chat/completions",
            json={
                "messages": USER,
                "tools": TOOLS,
                "tool_choice": "none",
                "chat_template": plain,
                "max_tokens": 1,
            },
        )
        assert fine.status_code == 200, fine.text
