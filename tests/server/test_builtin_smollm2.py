"""The real built-in model, ``toolkit serve --base-model toolkit/smollm2-135m-instruct`` (fetched once
per machine, tests/conftest.py): it answers in English; with the shipped tools template, ``required``,
named and ``none`` choices work on the base as on the tiny model, whole and streamed; a malformed call
in its output is plain text, not an error; tool results render; and one LoRA SFT job on tool calls
teaches it to call under ``auto``, in a checkpoint that completes in ``peft`` exactly as on the server."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

from conftest import LocalServer
from support.training_helpers import served
from toolkit.server.engine.codec import Codec
from toolkit.types.training import Model

NAME = "toolkit/smollm2-135m-instruct"
CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"]}
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "Weather in a city.", "parameters": CITY},
    },
    {
        "type": "function",
        "function": {"name": "get_time", "description": "Time in a city.", "parameters": CITY},
    },
]
WEATHER = [{"role": "user", "content": "What's the weather in Paris?"}]
CITIES = ["Paris", "Rome", "Oslo", "Lima", "Cairo", "Tokyo", "Quito", "Dublin"]


@pytest.fixture(scope="module")
def server(smollm2: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    srv = LocalServer(tmp_path_factory.mktemp("smollm2"), extra_args=("--base-model", NAME)).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server: LocalServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key=server.key, max_retries=0) as c:
        yield c


def create(client: openai.OpenAI, **kwargs: Any) -> Any:
    options = {"model": NAME, "messages": WEATHER, "tools": TOOLS, "temperature": 0, "max_tokens": 40}
    return client.chat.completions.create(**{**options, **kwargs})


def calls(message: Any) -> list[tuple[str, dict[str, Any]]]:
    """Each call's name and arguments, the arguments checked against the tool's schema."""
    out = []
    for call in message.tool_calls or []:
        arguments = json.loads(call.function.arguments)
        jsonschema.validate(arguments, CITY)
        out.append((call.function.name, arguments))
    return out


def test_it_is_served_under_its_names_and_answers_in_english(
    server: LocalServer, client: openai.OpenAI
) -> None:
    listed = {m.id: m.model_dump().get("root") for m in client.models.list()}
    assert listed == {NAME: NAME, "smollm2-135m-instruct": NAME}
    question = [{"role": "user", "content": "What is the capital of France?"}]
    for model in (NAME, "smollm2-135m-instruct"):
        out = client.chat.completions.create(model=model, messages=question, temperature=0, max_tokens=20)
        assert out.choices[0].message.content == "The capital of France is Paris."


def test_required_named_and_none_choices(client: openai.OpenAI) -> None:
    required = create(client, tool_choice="required")
    assert calls(required.choices[0].message)[0][0] in ("get_weather", "get_time")
    assert required.choices[0].finish_reason == "tool_calls" and required.choices[0].message.content is None
    one = create(client, tool_choice="required", parallel_tool_calls=False)
    assert len(calls(one.choices[0].message)) == 1
    named = create(client, tool_choice={"type": "function", "function": {"name": "get_time"}})
    assert [name for name, _ in calls(named.choices[0].message)] == ["get_time"]
    assert named.choices[0].finish_reason == "stop"  # vLLM's, for a named choice
    none = create(client, tool_choice="none", max_tokens=12)
    assert none.choices[0].message.tool_calls is None and "Paris" in (none.choices[0].message.content or "")


def test_a_streamed_call_reassembles_to_the_whole_one(client: openai.OpenAI) -> None:
    whole = create(client, tool_choice="required")
    stream = create(client, tool_choice="required", stream=True)
    parts: dict[int, dict[str, str]] = {}
    for chunk in stream:
        for delta in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
            part = parts.setdefault(delta.index, {"name": "", "arguments": ""})
            part["name"] += delta.function.name or "" if delta.function else ""
            part["arguments"] += delta.function.arguments or "" if delta.function else ""
    expected = [
        {"name": c.function.name, "arguments": c.function.arguments}
        for c in whole.choices[0].message.tool_calls
    ]
    assert [parts[i] for i in sorted(parts)] == expected


def test_a_malformed_call_in_the_output_is_plain_text(client: openai.OpenAI) -> None:
    """The output forced (by a regular expression) to a ``<tool_call>`` block that is not JSON: vLLM's
    hermes parser returns such text as content, and so does the server, whole and streamed."""
    bad = '<tool_call>{"name": get_weather}</tool_call>'
    regex = {"structured_outputs": {"regex": '<tool_call>\\{"name": get_weather\\}</tool_call>'}}
    out = create(client, extra_body=regex)
    assert (out.choices[0].message.content, out.choices[0].message.tool_calls) == (bad, None)
    assert out.choices[0].finish_reason == "stop"
    chunks = list(create(client, extra_body=regex, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == bad
    assert not any(c.choices[0].delta.tool_calls for c in chunks if c.choices)


def test_parallel_calls_in_the_output_stream_as_two_calls(client: openai.OpenAI) -> None:
    """Two calls back to back in the template's form, forced by a regular expression, under ``auto``."""
    two = [("get_weather", {"city": "Oslo"}), ("get_time", {"city": "Oslo"})]
    text = "".join(f'<tool_call>{{"name": "{n}", "arguments": {json.dumps(a)}}}</tool_call>' for n, a in two)
    regex = {"structured_outputs": {"regex": re.escape(text)}}
    chunks = list(create(client, extra_body=regex, max_tokens=80, stream=True))
    parts: dict[int, list[str]] = {}
    for chunk in chunks:
        for call in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
            part = parts.setdefault(call.index, ["", ""])
            part[0] += call.function.name or "" if call.function else ""
            part[1] += call.function.arguments or "" if call.function else ""
    assert [(name, json.loads(arguments)) for name, arguments in parts.values()] == two
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"


def test_calls_and_results_in_the_history_render_through_the_template(
    client: openai.OpenAI, smollm2: Path
) -> None:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    history = [
        *WEATHER,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C and sunny"},
    ]
    out = create(client, messages=history, max_tokens=1, extra_body={"return_token_ids": True})
    codec = Codec.from_folder(smollm2)
    prompt = codec.decode(out.prompt_token_ids, skip_special_tokens=False, spaces_between=False)
    assert prompt.endswith(
        '<|im_start|>assistant\n<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}'
        "</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>18 C and sunny</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert "<tools>\n" + json.dumps(TOOLS[0]["function"]) + "\n" in prompt


def demonstration(city: str) -> dict[str, Any]:
    arguments = json.dumps({"city": city})
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
    user = {"role": "user", "content": f"What's the weather in {city}?"}
    return {
        "messages": [user, {"role": "assistant", "content": None, "tool_calls": [call]}],
        "tools": TOOLS[:1],
    }


@pytest.fixture(scope="module")
def trained(server: LocalServer) -> Model:
    """A LoRA model (the default on this base) after one SFT job of 8 tool-call demonstrations (2
    gradient steps)."""
    with server.client() as tk_client:
        model = tk_client.models.create(project="smollm2", name="calls", base_model=NAME)
        job = tk_client.sft_training_jobs.create_from_data(
            model_id=model.id,
            data=[demonstration(city) for city in CITIES],
            config={"batch_size": 4, "learning_rate": 2e-3},
        )
        assert job.wait(progress=False).step == 1
        return model


def test_sft_teaches_auto_calls_and_the_checkpoint_completes_in_peft_as_served(
    server: LocalServer, client: openai.OpenAI, trained: Model, smollm2: Path, tmp_path: Path
) -> None:
    question = [{"role": "user", "content": "What's the weather in Madrid?"}]
    base = create(client, messages=question, tools=TOOLS[:1], max_tokens=12)
    assert base.choices[0].message.tool_calls is None  # the base answers in prose under `auto`
    out = create(
        client,
        model=served(trained, 1),
        messages=question,
        tools=TOOLS[:1],
        extra_body={"return_token_ids": True},
    )
    assert calls(out.choices[0].message) == [("get_weather", {"city": "Madrid"})]
    assert out.choices[0].finish_reason == "tool_calls"

    with server.client() as tk_client:
        folder = tk_client.models.checkpoints.download(trained.id, 1, tmp_path / "adapter")
    assert json.loads((folder / "adapter_config.json").read_text())["base_model_name_or_path"] == NAME
    adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(smollm2), folder).eval()
    prompt, completion = out.prompt_token_ids, out.choices[0].token_ids
    with torch.no_grad():
        ids = adapted.generate(
            torch.tensor([prompt]), max_new_tokens=len(completion), do_sample=False, pad_token_id=2
        )
    assert ids[0, len(prompt) :].tolist() == completion
