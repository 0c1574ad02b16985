"""Models and their checkpoints, scoped to the user who owns them."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal

from ...types.training import Checkpoint, DeleteCheckpointsResponse, LoRAConfig, Model, ModelCreate
from ..errors import Conflict, NotFound, Unprocessable
from .common import new_id, now_iso
from .db import Database
from .users import User


@dataclass(frozen=True)
class CheckpointRow:
    id: str
    model_id: str
    step: int
    path: str | None


@dataclass(frozen=True)
class ServableCheckpoint:
    """A checkpoint as the chat endpoint serves it: ``<name>:step<N>`` of a model of ``base_model``."""

    name: str
    base_model: str
    step: int
    created_at: datetime


def _lora(value: str | None) -> LoRAConfig | None:
    return LoRAConfig.model_validate_json(value) if value is not None else None


def _model(row: sqlite3.Row) -> Model:
    lora = _lora(row["lora_config"])
    return Model(
        id=row["id"],
        entity=row["entity"],
        project=row["project"],
        name=row["name"],
        base_model=row["base_model"],
        run_id=row["run_id"],
        created_at=row["created_at"],
        latest_step=row["latest_step"],
        full_finetuning=lora is None,
        lora_config=lora,
    )


def _checkpoint(row: sqlite3.Row) -> Checkpoint:
    trained = row["trained"]
    return Checkpoint(
        id=row["id"],
        step=row["step"],
        metrics=json.loads(row["metrics"]),
        created_at=row["created_at"],
        trained=bool(trained) if trained is not None else None,
    )


_MODEL_COLUMNS = "m.*, (SELECT MAX(step) FROM checkpoints c WHERE c.model_id = m.id) AS latest_step"


class Models:
    def __init__(self, db: Database) -> None:
        self.db = db

    # ------------------------------------------------------------------ models

    def create(self, user: User, req: ModelCreate, lora: LoRAConfig | None) -> tuple[Model, bool]:
        """Create a model that trains the ``lora`` adapter (None: every weight) with its step-0
        checkpoint; returns (model, created). An existing model is returned when asked, unless the
        request names another base model or, explicitly, another way of training (409)."""
        entity = req.entity or user.name
        with self.db.write() as conn:
            row = conn.execute(
                f"SELECT {_MODEL_COLUMNS} FROM models m"
                " WHERE user_id=? AND entity=? AND project=? AND name=?",
                (user.id, entity, req.project, req.name),
            ).fetchone()
            if row is not None:
                if not req.return_existing:
                    raise Conflict(f"Model {entity}/{req.project}/{req.name} already exists")
                if row["base_model"] != req.base_model:
                    raise Conflict(
                        f"Model {entity}/{req.project}/{req.name} exists with base model {row['base_model']}"
                    )
                existing = _lora(row["lora_config"])
                explicit = req.lora_config is not None or req.full_finetuning is not None
                if explicit and existing != lora:
                    trains = existing.model_dump_json() if existing else "full fine-tuning"
                    raise Conflict(f"Model {entity}/{req.project}/{req.name} exists and trains with {trains}")
                return _model(row), False
            model_id, now = new_id(), now_iso()
            conn.execute(
                "INSERT INTO models (id, user_id, entity, project, name, base_model, run_id, created_at,"
                " lora_config) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    model_id,
                    user.id,
                    entity,
                    req.project,
                    req.name,
                    req.base_model,
                    new_id().replace("-", "")[:8],
                    now,
                    lora.model_dump_json() if lora is not None else None,
                ),
            )
            conn.execute(
                "INSERT INTO checkpoints (id, model_id, step, metrics, path, created_at)"
                " VALUES (?, ?, 0, '{}', NULL, ?)",
                (new_id(), model_id, now),
            )
            return self.get(user, model_id), True

    def get(self, user: User, model_id: str) -> Model:
        row = self.db.conn.execute(
            f"SELECT {_MODEL_COLUMNS} FROM models m WHERE id = ? AND user_id = ?", (model_id, user.id)
        ).fetchone()
        if row is None:
            raise NotFound(f"Model {model_id} not found")
        return _model(row)

    def find(self, user: User, *, entity: str | None, project: str | None, name: str) -> Model | None:
        """A model by name (entity and project narrow the search when given)."""
        sql = f"SELECT {_MODEL_COLUMNS} FROM models m WHERE user_id = ? AND name = ?"
        args: list[str] = [user.id, name]
        for column, value in (("entity", entity), ("project", project)):
            if value is not None:
                sql += f" AND {column} = ?"
                args.append(value)
        row = self.db.conn.execute(sql + " ORDER BY created_at DESC LIMIT 1", args).fetchone()
        return _model(row) if row else None

    def base_model_of(self, model_id: str) -> str | None:
        row = self.db.conn.execute("SELECT base_model FROM models WHERE id = ?", (model_id,)).fetchone()
        return str(row["base_model"]) if row else None

    def lora_config_of(self, model_id: str) -> LoRAConfig | None:
        """The adapter the model trains (None: it is fully fine-tuned)."""
        row = self.db.conn.execute("SELECT lora_config FROM models WHERE id = ?", (model_id,)).fetchone()
        return _lora(row["lora_config"]) if row else None

    def all(self, user: User) -> list[Model]:
        rows = self.db.conn.execute(
            f"SELECT {_MODEL_COLUMNS} FROM models m WHERE user_id = ? ORDER BY created_at", (user.id,)
        ).fetchall()
        return [_model(r) for r in rows]

    def delete(self, user: User, model_id: str) -> tuple[int, int, int, list[str]]:
        """Delete a model and everything it owns.

        Returns (checkpoints, artifacts, trajectories, folders to remove) counted before the cascade.
        """
        self.get(user, model_id)
        with self.db.write() as conn:
            counts = [
                conn.execute(f"SELECT COUNT(*) FROM {table} WHERE model_id = ?", (model_id,)).fetchone()[0]
                for table in ("checkpoints", "artifacts", "trajectories")
            ]
            paths = [
                r[0]
                for table in ("checkpoints", "artifacts")
                for r in conn.execute(
                    f"SELECT path FROM {table} WHERE model_id = ? AND path IS NOT NULL", (model_id,)
                )
            ]
            conn.execute("DELETE FROM models WHERE id = ?", (model_id,))
        return counts[0], counts[1], counts[2], paths

    # ------------------------------------------------------------------ checkpoints

    def checkpoint_page(
        self, user: User, model_id: str, *, after: str | None, limit: int, order: Literal["asc", "desc"]
    ) -> tuple[list[Checkpoint], bool]:
        self.get(user, model_id)
        sql = "SELECT * FROM checkpoints WHERE model_id = ?"
        args: list[object] = [model_id]
        if after is not None:
            cursor = self.db.conn.execute(
                "SELECT step FROM checkpoints WHERE id = ? AND model_id = ?", (after, model_id)
            ).fetchone()
            if cursor is None:
                raise Unprocessable(["query", "after"], f"No checkpoint with id {after!r} in this model")
            sql += " AND step > ?" if order == "asc" else " AND step < ?"
            args.append(cursor["step"])
        sql += f" ORDER BY step {'ASC' if order == 'asc' else 'DESC'} LIMIT ?"
        args.append(limit + 1)
        rows = self.db.conn.execute(sql, args).fetchall()
        return [_checkpoint(r) for r in rows[:limit]], len(rows) > limit

    def servable(self, user: User) -> list[ServableCheckpoint]:
        """Every checkpoint of the user's models, oldest model first, by step."""
        rows = self.db.conn.execute(
            "SELECT m.name, m.base_model, c.step, c.created_at FROM models m"
            " JOIN checkpoints c ON c.model_id = m.id WHERE m.user_id = ? ORDER BY m.created_at, c.step",
            (user.id,),
        )
        return [
            ServableCheckpoint(r["name"], r["base_model"], r["step"], datetime.fromisoformat(r["created_at"]))
            for r in rows
        ]

    def checkpoint_folders(self) -> set[Path]:
        """The weight folders of every checkpoint (of every user) that has its own."""
        rows = self.db.conn.execute("SELECT path FROM checkpoints WHERE path IS NOT NULL")
        return {Path(r["path"]) for r in rows}

    def latest_checkpoint_folders(self) -> set[Path]:
        """The folders of every model's latest checkpoint (the ones training continues from)."""
        rows = self.db.conn.execute(
            "SELECT c.path FROM checkpoints c WHERE c.path IS NOT NULL AND c.step ="
            " (SELECT MAX(step) FROM checkpoints d WHERE d.model_id = c.model_id)"
        )
        return {Path(r["path"]) for r in rows}

    def metric_history(self, model_id: str, key: str) -> list[tuple[int, float]]:
        """``(step, value)`` of one metric over the model's checkpoints that have it."""
        rows = self.db.conn.execute(
            "SELECT step, metrics FROM checkpoints WHERE model_id = ? ORDER BY step", (model_id,)
        )
        history = [(r["step"], json.loads(r["metrics"]).get(key)) for r in rows]
        return [(s, float(v)) for s, v in history if isinstance(v, int | float)]

    def latest_checkpoint(self, model_id: str) -> CheckpointRow:
        row = self.db.conn.execute(
            "SELECT id, model_id, step, path FROM checkpoints WHERE model_id = ? ORDER BY step DESC LIMIT 1",
            (model_id,),
        ).fetchone()
        if row is None:
            raise NotFound(f"Model {model_id} has no checkpoint")
        return CheckpointRow(row["id"], row["model_id"], row["step"], row["path"])

    def checkpoint_at(self, model_id: str, step: int) -> CheckpointRow | None:
        row = self.db.conn.execute(
            "SELECT id, model_id, step, path FROM checkpoints WHERE model_id = ? AND step = ?",
            (model_id, step),
        ).fetchone()
        return CheckpointRow(row["id"], row["model_id"], row["step"], row["path"]) if row else None

    def current_step(self, model_id: str) -> int:
        row = self.db.conn.execute(
            "SELECT MAX(step) FROM checkpoints WHERE model_id = ?", (model_id,)
        ).fetchone()
        return int(row[0] or 0)

    def add_checkpoint(
        self,
        model_id: str,
        step: int,
        path: str | None,
        metrics: dict[str, float],
        *,
        trained: bool | None = None,
    ) -> str:
        """A checkpoint row; ``trained``: whether its job changed the weights (None: not a job's)."""
        checkpoint_id = new_id()
        with self.db.write() as conn:
            conn.execute(
                "INSERT INTO checkpoints (id, model_id, step, metrics, path, created_at, trained)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (checkpoint_id, model_id, step, json.dumps(metrics), path, now_iso(), trained),
            )
        return checkpoint_id

    def merge_metrics(self, conn: sqlite3.Connection, checkpoint_id: str, metrics: dict[str, float]) -> None:
        row = conn.execute("SELECT metrics FROM checkpoints WHERE id = ?", (checkpoint_id,)).fetchone()
        merged = {**json.loads(row["metrics"]), **metrics}
        conn.execute("UPDATE checkpoints SET metrics = ? WHERE id = ?", (json.dumps(merged), checkpoint_id))

    def delete_checkpoints(
        self, user: User, model_id: str, steps: Sequence[int]
    ) -> tuple[DeleteCheckpointsResponse, list[str]]:
        """Delete the given steps except the current (latest) one, which training and ``/log``
        continue from: it is kept and reported in ``kept_steps``. Returns the response and the
        weight folders to remove."""
        self.get(user, model_id)
        wanted = sorted(set(steps))
        with self.db.write() as conn:
            # matched in Python: any number of steps, of any size, is a valid request
            requested = set(wanted)
            current = self.current_step(model_id)
            rows = [
                r
                for r in conn.execute("SELECT step, path FROM checkpoints WHERE model_id = ?", (model_id,))
                if r["step"] in requested
            ]
            found = {r["step"] for r in rows}
            doomed = sorted(found - {current})
            if doomed:
                conn.execute(
                    f"DELETE FROM checkpoints WHERE model_id = ? AND step IN ({','.join('?' * len(doomed))})",
                    (model_id, *doomed),
                )
        response = DeleteCheckpointsResponse(
            deleted_count=len(doomed),
            not_found_steps=[s for s in wanted if s not in found],
            kept_steps=[current] if current in found else [],
        )
        return response, [r["path"] for r in rows if r["path"] and r["step"] != current]
