"""Checkpoint records (``checkpoint_records``, one row per checkpoint a job wrote), read back with the
checkpoint they describe. Step 0 (the base model) has no row: its record is built on read."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from ...types.records import CheckpointRecord
from ..errors import NotFound
from .db import Database
from .models import Models
from .users import User

_SELECT = (
    "SELECT c.step, c.created_at, c.metrics AS checkpoint_metrics, r.* FROM checkpoints c"
    " LEFT JOIN checkpoint_records r ON r.checkpoint_id = c.id WHERE c.model_id = ?"
)
_JSON_COLUMNS = ("request", "versions", "metrics")
# a base model's ``base_digest`` and ``base_revision`` (step 0's record), by its name
BaseFacts = Callable[[str], dict[str, str | None]]


@dataclass(frozen=True)
class RecordFields:
    """What the runner writes of a checkpoint beside its row."""

    parent_step: int
    job_id: str
    job_kind: str
    request: dict[str, Any]
    data_digest: str | None
    base_digest: str | None
    base_revision: str | None
    checkpoint_digest: str | None
    seed: int | None
    versions: dict[str, str]
    device: str
    dtype: str
    torch_threads: int
    cpu_capability: str
    deterministic: str
    metrics: dict[str, float]


class CheckpointRecords:
    def __init__(self, db: Database, models: Models) -> None:
        self.db = db
        self.models = models

    def add(self, conn: sqlite3.Connection, checkpoint_id: str, fields: RecordFields) -> None:
        """Inside the transaction that inserted the checkpoint row."""
        values = {k: json.dumps(v) if k in _JSON_COLUMNS else v for k, v in asdict(fields).items()}
        columns = ", ".join(["checkpoint_id", *values])
        conn.execute(
            f"INSERT INTO checkpoint_records ({columns}) VALUES ({', '.join('?' * (len(values) + 1))})",
            (checkpoint_id, *values.values()),
        )

    def get(self, user: User, model_id: str, step: int, base: BaseFacts) -> CheckpointRecord:
        """The record of checkpoint ``step``; ``base(base model)`` fills step 0's."""
        base_model = self.models.get(user, model_id).base_model
        row = self.db.conn.execute(_SELECT + " AND c.step = ?", (model_id, step)).fetchone()
        if row is None:
            raise NotFound(f"Model {model_id} has no checkpoint at step {step}")
        return _record(model_id, base_model, row, base)

    def all(self, user: User, model_id: str, base: BaseFacts) -> list[CheckpointRecord]:
        base_model = self.models.get(user, model_id).base_model
        rows = self.db.conn.execute(_SELECT + " ORDER BY c.step", (model_id,)).fetchall()
        return [_record(model_id, base_model, row, base) for row in rows]


def _record(model_id: str, base_model: str, row: sqlite3.Row, base: BaseFacts) -> CheckpointRecord:
    common: dict[str, Any] = {
        "model_id": model_id,
        "step": row["step"],
        "base_model": base_model,
        "created_at": row["created_at"],
    }
    if row["checkpoint_id"] is None:  # step 0, or a checkpoint of no job
        metrics = json.loads(row["checkpoint_metrics"])
        facts = base(base_model) if row["step"] == 0 else {}
        return CheckpointRecord(**common, **facts, metrics=metrics)
    skip = ("step", "created_at", "checkpoint_metrics")
    fields = {k: row[k] for k in row.keys() if k not in skip}  # noqa: SIM118 (a Row iterates values)
    fields.pop("checkpoint_id")
    for key in _JSON_COLUMNS:
        fields[key] = json.loads(fields[key]) if fields[key] is not None else None
    fields["versions"] = fields["versions"] or {}
    fields["metrics"] = fields["metrics"] or {}
    return CheckpointRecord(**common, **fields)
