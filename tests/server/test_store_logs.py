"""The trajectory store at unit level: migration 5 backfills what SQL can read from old rows, and
an RL job links each logged trajectory once (duplicates claim distinct rows), by a lookup whose
cost does not grow with the run."""

from __future__ import annotations

import json
from pathlib import Path

from toolkit.server.store.db import Database
from toolkit.server.store.logs import TrajectoryLogs
from toolkit.server.store.migrations import MIGRATIONS
from toolkit.server.store.models import Models
from toolkit.server.store.users import Users
from toolkit.server.training.log_metrics import rollup
from toolkit.types.training import LogRequest, ModelCreate, TrajectoryGroup


def store(path: Path) -> tuple[Database, TrajectoryLogs, str]:
    db = Database(path, MIGRATIONS)
    models = Models(db)
    model, _ = models.create(
        Users(db).get_or_create("u"), ModelCreate(project="p", name="m", base_model="b"), None
    )
    return db, TrajectoryLogs(db, models, rollup), model.id


def test_migration_5_backfills_index_trace_call_and_zero_std(tmp_path: Path) -> None:
    path = tmp_path / "toolkit.db"
    db = Database(path, MIGRATIONS[:4])
    models = Models(db)
    model, _ = models.create(
        Users(db).get_or_create("u"), ModelCreate(project="p", name="m", base_model="b"), None
    )
    with db.write() as conn:
        for rewards in ([1.0, 0.0, 1.0], [0.5, 0.5]):
            group = conn.execute(
                "INSERT INTO log_groups (model_id, split, step, num_trajectories, num_exceptions, data,"
                " created_at) VALUES (?, 'val', 0, ?, 0, '{}', '')",
                (model.id, len(rewards)),
            ).lastrowid
            for i, reward in enumerate(rewards):
                data = {"reward": reward, "metadata": {"weave_call_id": f"w{i}"} if i == 1 else {}}
                conn.execute(
                    "INSERT INTO trajectories (group_id, model_id, split, step, reward, data)"
                    " VALUES (?, ?, 'val', 0, ?, ?)",
                    (group, model.id, reward, json.dumps(data)),
                )
    db.close()
    db = Database(path, MIGRATIONS)
    rows = db.conn.execute(
        "SELECT idx, trace_call_id, zero_std, prompt_key FROM trajectories ORDER BY id"
    ).fetchall()
    assert [tuple(r) for r in rows] == [
        (0, None, 0, None),
        (1, "w1", 0, None),
        (2, None, 0, None),
        (0, None, 1, None),
        (1, "w1", 1, None),
    ]


def test_a_job_links_each_logged_copy_once_and_stores_the_rest(tmp_path: Path) -> None:
    db, logs, model_id = store(tmp_path / "toolkit.db")
    same = {"messages_and_choices": [{"role": "user", "content": "q"}], "reward": 1.0}
    logged = TrajectoryGroup.model_validate({"trajectories": [same, same]})
    logs.log(model_id, LogRequest(split="train", trajectory_groups=[logged]))
    trained = TrajectoryGroup.model_validate({"trajectories": [same, same, {**same, "reward": 0.0}]})
    with db.write() as conn:
        logs.record_training(conn, model_id, "job-1", 0, 1, [trained], [[0.5, 0.5, -1.0]])
    rows = db.conn.execute(
        "SELECT id, idx, reward, advantage, trained_step, job_id FROM trajectories ORDER BY id"
    ).fetchall()
    assert [tuple(r) for r in rows] == [
        (1, 0, 1.0, 0.5, 1, "job-1"),  # the two logged copies, each claimed once
        (2, 1, 1.0, 0.5, 1, "job-1"),
        (3, 2, 0.0, -1.0, 1, "job-1"),  # not logged: a new row, its index in the job's group kept
    ]
    (job_group,) = db.conn.execute("SELECT split, step, job_id FROM log_groups WHERE job_id IS NOT NULL")
    assert tuple(job_group) == ("train", 0, "job-1")


def test_a_jobs_lookup_of_logged_copies_does_not_grow_with_the_run(tmp_path: Path) -> None:
    """Each trajectory is looked up by its content, not by walking the model's earlier rows: the
    SQLite work of storing a job's trajectories is the same after 1 job as after 200."""
    db, logs, model_id = store(tmp_path / "toolkit.db")

    def group(step: int) -> TrajectoryGroup:
        text = [
            {"messages_and_choices": [{"role": "user", "content": f"q{step}-{i}"}], "reward": i}
            for i in range(8)
        ]
        return TrajectoryGroup.model_validate({"trajectories": text})

    def record(step: int) -> int:
        """Store a job's group at ``step``; the SQLite VM instructions it took (in units of 100)."""
        steps = [0]

        def count() -> int:
            steps[0] += 1
            return 0

        db.conn.set_progress_handler(count, 100)
        try:
            with db.write() as conn:
                logs.record_training(
                    conn, model_id, f"job-{step}", step, step + 1, [group(step)], [[1.0] * 8]
                )
        finally:
            db.conn.set_progress_handler(None, 100)
        return steps[0]

    first = record(0)
    for step in range(1, 200):
        record(step)
    assert record(200) < 2 * first
