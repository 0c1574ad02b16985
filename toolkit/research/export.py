"""Trajectory groups out: a pandas frame, a Hugging Face ``datasets.Dataset``, Parquet, JSONL.

Formats (what each carries: :mod:`toolkit.research.rows`): ``openai`` (OpenAI fine-tuning JSONL
with tools), ``trl`` (TRL conversational ``messages`` with a ``tools`` column), ``art`` (ART's
Parquet rows; as JSONL, ART's groups: one ``{"trajectories": [...]}`` per line, logprobs stripped as
ART strips them, or with ``keep_logprobs=True`` every field: the lossless form, which RL can train
on again). :mod:`toolkit.research.imports` reads each back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pandas as pd

from ..frames import groups_frame
from ..types.training import TrajectoryGroup
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


def to_rows(items: GroupSource, format: Format = "trl") -> list[dict[str, Any]]:
    """One row per trajectory in ``format`` (``art`` rows carry their group's index)."""
    check_format(format)
    out = []
    for index, group in enumerate(as_groups(items)):
        for t in group.trajectories:
            out.append(
                art_row(t, index) if format == "art" else openai_row(t) if format == "openai" else trl_row(t)
            )
    return out


def to_frame(items: GroupSource) -> pd.DataFrame:
    """:func:`toolkit.frames.groups_frame` (one row per trajectory: ``group``, ``index``, ``reward``,
    sizes, last content, ``metric/*``, ``meta/*``) plus ``trajectory``, the object itself, from which
    :func:`~toolkit.research.imports.from_frame` rebuilds the groups. Group-level fields are not carried."""
    groups = as_groups(items)
    frame = groups_frame(groups)
    trajectories = [t for g in groups for t in g.trajectories]
    frame["trajectory"] = pd.Series(trajectories, index=frame.index, dtype=object)
    return frame


def to_dataset(items: GroupSource, format: Format = "trl") -> datasets.Dataset:
    """A ``datasets.Dataset`` of the format's rows (``tools`` as JSON strings in every format, since
    tool schemas differ row to row)."""
    table = to_rows(items, format)
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
    pq.write_table(pa.Table.from_pylist(to_rows(items, "art"), schema=_art_schema()), str(path))
    return Path(path)


def _without_logprobs(group: TrajectoryGroup) -> dict[str, Any]:
    data = group.model_dump(mode="json")
    for trajectory in data["trajectories"]:
        histories = [trajectory, *trajectory["additional_histories"]]
        for entry in (e for h in histories for e in h["messages_and_choices"]):
            if "message" in entry:
                entry["logprobs"] = None
    return data


def to_jsonl(
    items: GroupSource, path: str | Path, format: Format = "art", *, keep_logprobs: bool = False
) -> Path:
    """JSONL: ``art`` writes one group per line, every field but logprobs (as ART does), or every
    field with ``keep_logprobs`` (lossless: :func:`~toolkit.research.imports.read_jsonl` gives back
    equal groups, sampler logprobs and token ids included, so RL can train on them); ``openai`` and
    ``trl`` one trajectory per line, for SFT (they carry no logprobs: ``keep_logprobs`` is an error)."""
    check_format(format)
    if keep_logprobs and format != "art":
        raise ValueError(f"format {format!r} has no place for logprobs: keep_logprobs needs format 'art'")
    groups = as_groups(items)
    if format != "art":
        lines = to_rows(groups, format)
    else:
        lines = [g.model_dump(mode="json") if keep_logprobs else _without_logprobs(g) for g in groups]
    Path(path).write_text("".join(json.dumps(line) + "\n" for line in lines))
    return Path(path)
