"""What a call sent to the chat endpoint: every seeded chat completion it made, recorded by a
``tk.experiment`` around it (the experiment keeps each seeded request with what it sampled). Tool
call ids are drawn at random by the server, as vLLM's are: they are left out of the messages."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import TypeVar

import toolkit as tk

T = TypeVar("T")
TOOL_CALL_ID = re.compile(r"chatcmpl-tool-[0-9a-f]+")
Request = tuple[str, int, str]  # the request's messages (JSON), its seed, what it sampled (JSON)


def seeded_requests(call: Callable[[], T]) -> tuple[T, list[Request]]:
    """``call()``'s result and its seeded chat completions, sorted (concurrent ones end in any order)."""
    with tk.experiment("seeded-requests", seed=0) as exp:
        result = call()
    samples = exp.record().samples
    return result, sorted(
        (
            TOOL_CALL_ID.sub("chatcmpl-tool-*", json.dumps(s.request["messages"], sort_keys=True)),
            s.request["seed"],
            json.dumps(s.choices),
        )
        for s in samples
    )
