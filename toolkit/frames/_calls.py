"""Frames of chat completions (per choice, per token) and trace calls."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd
from pydantic import BaseModel

from ..types.chat import ChatCompletion
from ._common import FLOAT, INT, STR, TIME, as_model, frame

COMPLETION_COLUMNS = {
    "id": STR,
    "model": STR,
    "created": TIME,
    "choice": INT,
    "finish_reason": STR,
    "content": STR,
    "prompt_tokens": INT,
    "completion_tokens": INT,
    "total_tokens": INT,
    "latency_s": FLOAT,
    "mean_logprob": FLOAT,
}
CALL_COLUMNS = {
    "id": STR,
    "trace_id": STR,
    "parent_id": STR,
    "op_name": STR,
    "name": STR,
    "status": STR,
    "started_at": TIME,
    "ended_at": TIME,
    "latency_ms": FLOAT,
    "prompt_tokens": INT,
    "completion_tokens": INT,
    "total_tokens": INT,
    "cost_usd": FLOAT,
    "exception": STR,
}


def completions_frame(
    completions: Iterable[ChatCompletion | Mapping[str, Any]], latency_s: Sequence[float] | None = None
) -> pd.DataFrame:
    """One row per choice: model, finish reason, content, usage, latency and mean token logprob.

    ``latency_s`` gives each completion's wall time (the wire body does not carry it).
    """
    rows = []
    for n, value in enumerate(completions):
        completion = as_model(ChatCompletion, value)
        usage = completion.usage
        for choice in completion.choices:
            tokens = choice.logprobs.content if choice.logprobs and choice.logprobs.content else []
            rows.append(
                {
                    "id": completion.id,
                    "model": completion.model,
                    "created": pd.Timestamp(completion.created, unit="s", tz="UTC"),
                    "choice": choice.index,
                    "finish_reason": choice.finish_reason,
                    "content": choice.message.content,
                    "prompt_tokens": usage.prompt_tokens,
                    "completion_tokens": usage.completion_tokens,
                    "total_tokens": usage.total_tokens,
                    "latency_s": latency_s[n] if latency_s is not None else None,
                    "mean_logprob": sum(t.logprob for t in tokens) / len(tokens) if tokens else None,
                }
            )
    return frame(rows, COMPLETION_COLUMNS)


def logprobs_frame(completion: ChatCompletion | Mapping[str, Any], choice: int = 0) -> pd.DataFrame:
    """One row per generated token of a choice: position, token, logprob, probability."""
    comp = as_model(ChatCompletion, completion)
    logprobs = comp.choices[choice].logprobs
    tokens = logprobs.content if logprobs and logprobs.content else []
    rows = [
        {"position": i, "token": t.token, "logprob": t.logprob, "prob": math.exp(t.logprob)}
        for i, t in enumerate(tokens)
    ]
    return frame(rows, {"position": INT, "token": STR, "logprob": FLOAT, "prob": FLOAT})


def _call_dict(call: BaseModel | Mapping[str, Any]) -> Mapping[str, Any]:
    return call.model_dump(mode="json") if isinstance(call, BaseModel) else call


def _usage_totals(usage: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    totals = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    for per_model in usage.values():
        totals["prompt_tokens"] += (per_model.get("prompt_tokens") or 0) + (
            per_model.get("input_tokens") or 0
        )
        totals["completion_tokens"] += (per_model.get("completion_tokens") or 0) + (
            per_model.get("output_tokens") or 0
        )
        totals["total_tokens"] += per_model.get("total_tokens") or 0
    return totals


def call_summary(call: BaseModel | Mapping[str, Any]) -> dict[str, Any]:
    """The flat summary of one trace call: name, status, times, latency, token totals and cost."""
    c = _call_dict(call)
    summary = c.get("summary") or {}
    weave = summary.get("weave") or {}
    costs = weave.get("costs") or {}
    cost = sum(
        (v.get("prompt_tokens_total_cost") or 0) + (v.get("completion_tokens_total_cost") or 0)
        for v in costs.values()
    )
    status = weave.get("status") or (
        "error" if c.get("exception") else "success" if c.get("ended_at") else "running"
    )
    name = c.get("display_name") or weave.get("trace_name") or c.get("op_name")
    return {
        "id": c.get("id"),
        "trace_id": c.get("trace_id"),
        "parent_id": c.get("parent_id"),
        "op_name": c.get("op_name"),
        "name": name,
        "status": status,
        "started_at": c.get("started_at"),
        "ended_at": c.get("ended_at"),
        "latency_ms": weave.get("latency_ms"),
        **_usage_totals(summary.get("usage") or {}),
        "cost_usd": cost if costs else None,
        "exception": c.get("exception"),
    }


def calls_frame(calls: Iterable[BaseModel | Mapping[str, Any]]) -> pd.DataFrame:
    """One row per trace call (flattened summary); latency is computed when the server left it out."""
    df = frame([call_summary(c) for c in calls], CALL_COLUMNS)
    missing = df["latency_ms"].isna() & df["ended_at"].notna()
    df.loc[missing, "latency_ms"] = (
        df.loc[missing, "ended_at"] - df.loc[missing, "started_at"]
    ).dt.total_seconds() * 1000
    return df
