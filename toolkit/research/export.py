"""Trajectory groups out: a pandas frame, a Hugging Face ``datasets.Dataset``, Parquet, JSONL.

Formats (what each carries: :mod:`toolkit.research.rows`): ``openai`` (OpenAI fine-tuning JSONL
with tools), ``trl`` (TRL conversational ``messages`` with a ``tools`` column), ``art`` (ART's
Parquet rows; as JSONL, ART's groups: one ``{"trajectories": [...]}`` per line, logprobs stripped).
:mod:`toolkit.research.imports` reads each back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pandas as pd

from ..types.training import Choice, Trajectory, TrajectoryGroup
from .records import GroupSource, as_groups
from .rows import art_row, check_format, openai_row, trl_row

if TYPE_CHECKING:
    import datasets

Format = Literal["openai", "trl", "art"]
EXTRA = "pip install 'rl-notebook-toolkit[research]'"


def optional(module: str) -> Any:
    """Import ``datasets`` or ``pyarrow`` (the ``research`` extra), or say how to install it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"{module} is needed for this export: {EXTRA}") from exc


def rows(items: GroupSource, format: Format = "trl") -> list[dict[str, Any]]:
    """One row per trajectory in ``format`` (``art`` rows carry their group's index)."""
    check_format(format)
    out = []
    for index, group in enumerate(as_groups(items)):
        for t in group.trajectories:
            out.append(
                art_row(t, index) if format == "art" else openai_row(t) if format == "openai" else trl_row(t)
            )
    return out


def _last(trajectory: Trajectory) -> tuple[str | None, str | None]:
    last = trajectory.messages_and_choices[-1] if trajectory.messages_and_choices else None
    if isinstance(last, Choice):
        return last.message.content, last.finish_reason
    return (last.content if last is not None and isinstance(last.content, str) else None), None


def to_frame(items: GroupSource) -> pd.DataFrame:
    """One row per trajectory: ``group``, ``index`` (in its group), ``reward``, ``num_messages``,
    ``num_turns`` (choices), ``last_content``, ``finish_reason``, ``metric/<key>``, ``meta/<key>``
    and ``trajectory`` (the object itself). Group-level fields are not carried."""
    records = []
    for g, group in enumerate(as_groups(items)):
        for i, t in enumerate(group.trajectories):
            content, finish = _last(t)
            records.append(
                {
                    "group": g,
                    "index": i,
                    "reward": t.reward,
                    "num_messages": len(t.messages_and_choices),
                    "num_turns": len(t.choices()),
                    "last_content": content,
                    "finish_reason": finish,
                    **{f"metric/{k}": v for k, v in t.metrics.items()},
                    **{f"meta/{k}": v for k, v in t.metadata.items()},
                    "trajectory": t,
                }
            )
    return pd.DataFrame(records)


def to_dataset(items: GroupSource, format: Format = "trl") -> datasets.Dataset:
    """A ``datasets.Dataset`` of the format's rows (``tools`` as JSON strings in every format, since
    tool schemas differ row to row)."""
    table = rows(items, format)
    if format == "openai":
        table = [{**r, "tools": json.dumps(r["tools"])} if "tools" in r else r for r in table]
    return optional("datasets").Dataset.from_list(table)


def _art_schema() -> Any:
    pa = optional("pyarrow")
    message = pa.struct(
        [
            ("role", pa.string()),
            ("content", pa.string()),
            ("tool_calls", pa.string()),
            ("tool_call_id", pa.string()),
            ("trainable", pa.bool_()),
        ]
    )
    return pa.schema(
        [
            ("group_index", pa.int64()),
            ("reward", pa.float64()),
            ("metrics", pa.string()),
            ("metadata", pa.string()),
            ("tools", pa.string()),
            ("logs", pa.list_(pa.string())),
            ("messages", pa.list_(message)),
        ]
    )


def to_parquet(items: GroupSource, path: str | Path) -> Path:
    """ART's Parquet layout, one row per trajectory (see :mod:`toolkit.research.rows`)."""
    pa = optional("pyarrow")
    pq = optional("pyarrow.parquet")
    pq.write_table(pa.Table.from_pylist(rows(items, "art"), schema=_art_schema()), str(path))
    return Path(path)


def _without_logprobs(group: TrajectoryGroup) -> dict[str, Any]:
    data = group.model_dump(mode="json")
    for trajectory in data["trajectories"]:
        histories = [trajectory, *trajectory["additional_histories"]]
        for entry in (e for h in histories for e in h["messages_and_choices"]):
            if "message" in entry:
                entry["logprobs"] = None
    return data


def to_jsonl(items: GroupSource, path: str | Path, format: Format = "art") -> Path:
    """JSONL: ``art`` writes one group per line (every field but logprobs); ``openai`` and ``trl``
    one trajectory per line."""
    check_format(format)
    groups = as_groups(items)
    lines = [_without_logprobs(g) for g in groups] if format == "art" else rows(groups, format)
    Path(path).write_text("".join(json.dumps(line) + "\n" for line in lines))
    return Path(path)
