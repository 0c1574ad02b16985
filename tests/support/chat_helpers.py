"""Helpers shared by the chat-endpoint tests: one request, its text, the served model's own logprobs."""

from __future__ import annotations

from typing import Any

import httpx
import torch
from transformers import PreTrainedModel

USER = [{"role": "user", "content": "Say something."}]


def chat(http: httpx.Client, **body: Any) -> dict[str, Any]:
    """``POST /v1/chat/completions`` with ``USER`` as messages unless given; must answer 200."""
    r = http.post("/v1/chat/completions", json={"messages": USER, **body})
    assert r.status_code == 200, r.text
    result: dict[str, Any] = r.json()
    return result


def text(resp: dict[str, Any], i: int = 0) -> str:
    return str(resp["choices"][i]["message"]["content"])


def next_token_logprobs(model: PreTrainedModel, ids: list[int]) -> torch.Tensor:
    """``[len(ids), V]``: row ``i`` is the log-distribution of the token after ``ids[: i + 1]``."""
    with torch.no_grad():
        logits: torch.Tensor = model(torch.tensor([ids])).logits[0]
    return logits.float().log_softmax(-1)
