"""Migration 7: checkpoints of jobs that ended before records existed get what the store still knows
(parent step, job, kind, metrics); the rest of their record stays None."""

from __future__ import annotations

import json
from pathlib import Path

from toolkit.server.store.db import Database
from toolkit.server.store.migrations import MIGRATIONS
from toolkit.server.store.models import Models
from toolkit.server.store.records import CheckpointRecords
from toolkit.server.store.users import Users
from toolkit.types.training import ModelCreate

WHEN = "2026-01-01T00:00:00+00:00"


def test_migration_7_records_earlier_job_checkpoints_with_what_is_known(tmp_path: Path) -> None:
    path = tmp_path / "toolkit.db"
    db = Database(path, MIGRATIONS[:6])
    user = Users(db).get_or_create("u")
    model, _ = Models(db).create(user, ModelCreate(project="p", name="m", base_model="b"), None)
    metrics = {"sft/final_loss": 1.5, "data/step_num_gradient_steps": 2.0}
    with db.write() as conn:
        for step, values in ((1, metrics), (2, {"x": 1.0})):
            conn.execute(
                "INSERT INTO checkpoints (id, model_id, step, metrics, path, created_at)"
                " VALUES (?, ?, ?, ?, NULL, ?)",
                (f"c{step}", model.id, step, json.dumps(values), WHEN),
            )
        conn.execute(  # a succeeded job (its request was cleared when it ended) wrote step 1
            "INSERT INTO training_jobs (id, user_id, model_id, kind, status, request, created_at,"
            " base_step, result_step, checkpoint_id)"
            " VALUES ('j1', ?, ?, 'sft', 'succeeded', NULL, ?, 0, 1, 'c1')",
            (user.id, model.id, WHEN),
        )
    db.close()
    db = Database(path, MIGRATIONS)
    facts = {"base_digest": "digest of b"}
    records = CheckpointRecords(db, Models(db)).all(user, model.id, lambda base: facts if base == "b" else {})
    db.close()
    got = [
        r.model_dump(exclude={"created_at", "model_id", "base_model"}, exclude_defaults=True) for r in records
    ]
    assert got == [
        {"step": 0, "base_digest": "digest of b"},
        {"step": 1, "parent_step": 0, "job_id": "j1", "job_kind": "sft", "metrics": metrics},
        {"step": 2, "metrics": {"x": 1.0}},  # a checkpoint no job wrote
    ]
    assert all(r.versions == {} and r.device is None and r.deterministic is None for r in records)
