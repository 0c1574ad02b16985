"""SFT training data as ART's ``train.jsonl``: one ``{"messages", "tools"?}`` object per line."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..types.training import Trajectory

SFTItem = Trajectory | Mapping[str, Any] | Sequence[Mapping[str, Any]]
SFTData = str | Path | Iterable[SFTItem]


def _record(item: SFTItem) -> dict[str, Any]:
    if isinstance(item, Trajectory) or (isinstance(item, Mapping) and "messages_and_choices" in item):
        trajectory = Trajectory.model_validate(item)
        record: dict[str, Any] = {"messages": trajectory.messages()}
        if trajectory.tools:
            record["tools"] = [t.model_dump(mode="json", exclude_none=True) for t in trajectory.tools]
        return record
    if isinstance(item, Mapping):
        return dict(item)
    return {"messages": [dict(m) for m in item]}


def train_jsonl(data: SFTData) -> bytes:
    """A JSONL file's bytes as they are, or trajectories / ``{"messages"}`` objects / message lists
    turned into lines (a trajectory's choices become assistant messages)."""
    if isinstance(data, str | Path):
        return Path(data).read_bytes()
    return "".join(json.dumps(_record(item)) + "\n" for item in data).encode()
