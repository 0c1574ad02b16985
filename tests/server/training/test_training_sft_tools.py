"""SFT data with tools: ART's ``train.jsonl``, OpenAI fine-tuning lines (arguments as JSON strings) and
TRL lines (arguments as objects, results matched by name, ``tools`` as a JSON string) upload and train;
bad lines fail with their line number, at upload and in the job."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from conftest import LocalServer
from support.training_helpers import new_model
from toolkit.client.jobs import TrainingJobFailed
from toolkit.server.training.data import TrainingDataError, iter_conversations

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
OPENAI = {
    "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Lyon"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_2", "content": "20C"},  # results in any order, by id
        {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
        {"role": "assistant", "content": "18C."},
    ],
    "tools": TOOLS,
    "parallel_tool_calls": True,
}
TRL = {
    "messages": [
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "tool_calls": [
                {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
            ],
        },
        {"role": "tool", "name": "get_weather", "content": "-2C"},
        {"role": "assistant", "content": "-2C."},
    ],
    "tools": json.dumps(TOOLS),
}


def jsonl(*records: Any) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def upload(http: httpx.Client, data: bytes) -> httpx.Response:
    return http.post(
        "/v1/preview/artifacts",
        data={"project": "sft-tools"},
        files=[("files", ("train.jsonl", data, "application/octet-stream"))],
    )


def with_message(index: int, change: dict[str, Any] | None, base: dict[str, Any] = OPENAI) -> dict[str, Any]:
    messages = [dict(m) for m in base["messages"]]
    if change is None:
        del messages[index]
    else:
        messages[index] = {**messages[index], **change}
    return {**base, "messages": messages}


def test_tool_conversations_upload_and_train(server: LocalServer, http: httpx.Client) -> None:
    r = upload(http, jsonl(OPENAI, TRL))
    assert r.status_code == 200, r.text
    assert r.json()["num_records"] == 2
    client = server.client()
    model = new_model(client, "sft-tools")
    job = client.sft_training_jobs.create_from_data(
        model_id=model.id, data=[OPENAI, TRL] * 4, config={"batch_size": 4, "learning_rate": 1e-3}
    )
    checkpoint = job.wait(progress=False)
    assert checkpoint.step == 1 and checkpoint.metrics["data/step_num_gradient_steps"] == 2.0
    events = [e.type for e in client.training_jobs.events.list(job.id)]
    assert events[0] == "training_started" and events[-1] == "training_ended"


BAD = [
    (
        with_message(3, {"tool_call_id": "call_9"}),
        "message 3: a tool message for call 'call_9' without a matching tool call before it",
    ),
    (
        with_message(2, None),
        "message 2: a tool message for call 'call_2' without a matching tool call before it",
    ),
    (
        with_message(5, {"role": "tool", "tool_call_id": "call_1"}),
        "message 5: a tool message for call 'call_1' without a matching tool call before it",
    ),
    (
        with_message(1, {"role": "tool", "tool_call_id": None, "name": None}),
        "message 1: a tool message without a matching tool call before it",
    ),
    (
        with_message(
            2,
            {"tool_calls": [{"id": "c", "function": {"name": "get_weather", "arguments": "{city: Paris}"}}]},
        ),
        "message 2, tool call 0: the arguments are not JSON (Expecting property name enclosed in double"
        " quotes)",
    ),
    (
        with_message(
            2, {"tool_calls": [{"id": "c", "function": {"name": "get_weather", "arguments": "[1]"}}]}
        ),
        "message 2, tool call 0: the arguments must be a JSON object (or a string of one)",
    ),
    (
        with_message(2, {"tool_calls": [{"id": "c", "function": {"name": "search", "arguments": "{}"}}]}),
        "message 2, tool call 0: calls 'search', which is not among the line's tools",
    ),
    (  # no tools at all: every call is to a tool the line does not offer (docs/interfaces.md)
        {k: v for k, v in OPENAI.items() if k != "tools"},
        "message 2, tool call 0: calls 'get_weather', but the line has no 'tools'",
    ),
    (
        with_message(2, {"tool_calls": [{"id": "c", "function": {"arguments": "{}"}}]}),
        "message 2, tool call 0: needs 'function' with a string 'name'",
    ),
    (
        with_message(0, {"role": "narrator"}),
        "message 0: unknown role 'narrator' (use one of system, developer, user, assistant, tool)",
    ),
    (
        {**OPENAI, "tools": "[{"},
        "'tools' is a string that is not JSON (Expecting property name enclosed in double quotes)",
    ),
    (
        {**OPENAI, "tools": [{"type": "function"}]},
        "tools[0] must be a function tool with a string function.name",
    ),
    (
        with_message(
            2,
            {
                "tool_calls": [
                    {"id": "c", "function": {"name": "get_weather"}},
                    {"id": "c", "function": {"name": "get_weather"}},
                ]
            },
        ),
        "message 2, tool call 1: the id 'c' is used twice",
    ),
]


@pytest.mark.parametrize(("record", "message"), BAD)
def test_bad_tool_data_fails_at_upload_with_its_line(
    http: httpx.Client, record: dict[str, Any], message: str
) -> None:
    r = upload(http, jsonl(OPENAI, TRL, record))
    assert r.status_code == 422
    assert r.json()["detail"] == [{"loc": ["body", "train.jsonl", 3], "msg": message, "type": "value_error"}]


def test_the_jobs_parser_applies_the_uploads_checks() -> None:
    """``iter_conversations``, which the job parses its file with, raises the upload's errors with the
    line (a job failing so on a file changed on disk: the next test)."""
    data = jsonl(OPENAI, BAD[0][0])
    with pytest.raises(TrainingDataError, match=r"^train.jsonl, line 2: message 3: a tool message for call"):
        list(iter_conversations("train.jsonl", data))
    choice = {
        "message": {
            "role": "assistant",
            "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": "{"}}],
        }
    }
    trajectory = {
        "messages_and_choices": [
            {"role": "user", "content": "q"},
            choice,
            {"role": "tool", "tool_call_id": "a", "content": "r"},
            {"message": {"content": "ok"}},
        ],
        "tools": [{"type": "function", "function": {"name": "f"}}],
    }
    with pytest.raises(
        TrainingDataError,
        match=r"^trajectories.jsonl, line 1: message 1, tool call 0: the arguments are not JSON",
    ):
        list(iter_conversations("trajectories.jsonl", jsonl(trajectory)))
    without_tools = {"messages_and_choices": trajectory["messages_and_choices"]}
    with pytest.raises(
        TrainingDataError,
        match=r"^trajectories.jsonl, line 1: message 1, tool call 0: calls 'f', but the line has no",
    ):
        list(iter_conversations("trajectories.jsonl", jsonl(without_tools)))


def test_a_stored_line_calling_a_tool_without_tools_fails_the_job(
    server: LocalServer, http: httpx.Client
) -> None:
    """Data stored before the rule (or changed on disk since its upload) is checked again by the job,
    which fails naming the file, the line and the call instead of training on it."""
    client = server.client()
    model = new_model(client, "sft-no-tools")
    r = upload(http, jsonl(TRL, OPENAI))
    assert r.status_code == 200, r.text
    artifact = r.json()
    (stored,) = server.data_dir.glob(f"**/{artifact['id']}/train.jsonl")
    stored.write_bytes(jsonl(TRL, {k: v for k, v in OPENAI.items() if k != "tools"}))
    job = client.sft_training_jobs.create(model_id=model.id, training_data_url=artifact["url"])
    with pytest.raises(TrainingJobFailed) as failed:
        job.wait(progress=False)
    assert (
        failed.value.message
        == "train.jsonl, line 2: message 2, tool call 0: calls 'get_weather', but the line has no 'tools'"
    )
    assert [c.step for c in client.models.checkpoints.list(model.id)] == [0]
