"""Exported trajectories back in, as :class:`TrajectoryGroup` objects.

Each reader undoes its writer in :mod:`toolkit.research.export`: what the format carries comes back
equal, what it drops takes its default (see :mod:`toolkit.research.rows`). ``openai`` and ``trl``
rows have no groups: each becomes a group of its own. ``art`` rows (Parquet, a dataset) are grouped
by ``group_index``, in order of first appearance.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from ..types.training import Trajectory, TrajectoryGroup
from .export import Format, optional
from .rows import check_format, from_art_row, from_openai_row, from_trl_row


def from_rows(rows: Iterable[dict[str, Any]], format: Format = "trl") -> list[TrajectoryGroup]:
    """Rows of ``format`` (as :func:`toolkit.research.export.to_rows` makes them) back into groups."""
    check_format(format)
    if format != "art":
        read = from_openai_row if format == "openai" else from_trl_row
        return [TrajectoryGroup(trajectories=[read(row)]) for row in rows]
    groups: dict[Any, TrajectoryGroup] = {}
    for row in rows:
        group = groups.setdefault(row["group_index"], TrajectoryGroup(trajectories=[]))
        group.trajectories.append(from_art_row(row))
    return list(groups.values())


def from_frame(frame: pd.DataFrame) -> list[TrajectoryGroup]:
    """A :func:`~toolkit.research.export.to_frame` frame (or any rows of it) back into groups."""
    groups: dict[Any, TrajectoryGroup] = {}
    for group, trajectory in zip(frame["group"], frame["trajectory"], strict=True):
        groups.setdefault(group, TrajectoryGroup(trajectories=[])).trajectories.append(
            Trajectory.model_validate(trajectory)
        )
    return list(groups.values())


def from_dataset(dataset: Any, format: Format = "trl") -> list[TrajectoryGroup]:
    """A ``datasets.Dataset`` of ``format`` rows back into groups."""
    return from_rows(iter(dataset), format)


def read_parquet(path: str | Path) -> list[TrajectoryGroup]:
    """ART-layout Parquet (as :func:`~toolkit.research.export.to_parquet` writes it) back into groups."""
    return from_rows(optional("pyarrow.parquet").read_table(str(path)).to_pylist(), "art")


def read_jsonl(path: str | Path, format: Format = "art") -> list[TrajectoryGroup]:
    """JSONL back into groups: ``art`` lines are groups, ``openai``/``trl`` lines trajectories."""
    check_format(format)
    lines = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    if format == "art":
        return [TrajectoryGroup.model_validate(line) for line in lines]
    return from_rows(lines, format)
