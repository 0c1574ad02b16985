"""The trace service's completions with tool calls: the call recorded for a streamed completion
holds the same tool calls as the whole response (content ``null`` beside them)."""

from __future__ import annotations

from typing import Any

import httpx

from conftest import LocalServer
from support.traces_helpers import jsonl

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"enum": ["Paris", "Oslo"]}, "days": {"enum": [1, 2]}},
                "required": ["city", "days"],
                "additionalProperties": False,
            },
        },
    },
    {"type": "function", "function": {"name": "now"}},
]


def named_calls(message: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]]


def test_a_streamed_completion_records_its_tool_calls(
    server: LocalServer, tr: httpx.Client, project: str
) -> None:
    inputs = {
        "model": server.client().served_models().data[0].id,
        "messages": [{"role": "user", "content": "Weather?"}],
        "tools": TOOLS,
        "tool_choice": "required",
        "seed": 3,
        "max_tokens": 200,
    }
    whole = tr.post("/completions/create", json={"project_id": project, "inputs": inputs}).json()
    expected = whole["response"]["choices"][0]
    assert expected["finish_reason"] == "tool_calls" and expected["message"].get("content") is None

    lines = jsonl(tr.post("/completions/create_stream", json={"project_id": project, "inputs": inputs}))
    call_id = lines[0]["_meta"]["weave_call_id"]
    call = tr.post("/call/read", json={"project_id": project, "id": call_id}).json()["call"]
    [recorded] = call["output"]["choices"]
    assert recorded["finish_reason"] == "tool_calls" and recorded["message"].get("content") is None
    assert named_calls(recorded["message"]) == named_calls(expected["message"])
    choices = [ch for line in lines[1:] for ch in line.get("choices", [])]
    sent = [d for ch in choices for d in ch["delta"].get("tool_calls", [])]
    ids = [d["id"] for d in sent if "id" in d]
    assert [c["id"] for c in recorded["message"]["tool_calls"]] == ids
    assert all(c["type"] == "function" for c in recorded["message"]["tool_calls"])
