"""The SQLite access layer: one connection per thread, and ``close()`` closes all of them; a
migration that fills a new column from what older rows hold."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

import pytest

from toolkit.server.store.db import Database
from toolkit.server.store.migrations import MIGRATIONS
from toolkit.server.store.models import Models
from toolkit.server.store.users import Users
from toolkit.types.training import ModelCreate


def test_close_closes_the_connection_of_every_thread(tmp_path: Path) -> None:
    db = Database(tmp_path / "toolkit.db", MIGRATIONS)
    connections: list[sqlite3.Connection] = [db.conn]
    opened = threading.Barrier(4)
    closed = threading.Event()

    def reader() -> None:
        connections.append(db.conn)
        db.conn.execute("SELECT COUNT(*) FROM models").fetchone()
        opened.wait(10)
        closed.wait(10)  # the thread is still alive when the database closes

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for thread in threads:
        thread.start()
    opened.wait(10)
    assert len({id(c) for c in connections}) == 4  # one connection per thread
    db.close()
    closed.set()
    for thread in threads:
        thread.join(10)
    for conn in connections:
        with pytest.raises(sqlite3.ProgrammingError, match="closed"):
            conn.execute("SELECT 1")
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        db.conn.execute("SELECT 1")


def test_a_new_thread_cannot_open_a_closed_database(tmp_path: Path) -> None:
    db = Database(tmp_path / "toolkit.db", MIGRATIONS)
    db.close()
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            db.conn.execute("SELECT 1")
        except sqlite3.ProgrammingError as exc:
            errors.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    thread.join(10)
    assert [str(e) for e in errors] == [f"the database {tmp_path / 'toolkit.db'} is closed"]


def test_migration_6_reads_trained_from_the_metrics_of_earlier_checkpoints(tmp_path: Path) -> None:
    path = tmp_path / "toolkit.db"
    db = Database(path, MIGRATIONS[:5])
    user = Users(db).get_or_create("u")
    model, _ = Models(db).create(user, ModelCreate(project="p", name="m", base_model="b"), None)
    with db.write() as conn:
        for step, metrics in (
            (1, {"data/step_num_gradient_steps": 3.0}),
            (2, {"data/step_num_gradient_steps": 0}),
            (3, {}),
        ):
            conn.execute(
                "INSERT INTO checkpoints (id, model_id, step, metrics, path, created_at)"
                " VALUES (?, ?, ?, ?, NULL, '2026-01-01T00:00:00+00:00')",
                (f"c{step}", model.id, step, json.dumps(metrics)),
            )
    db.close()
    db = Database(path, MIGRATIONS)
    page, _ = Models(db).checkpoint_page(user, model.id, after=None, limit=10, order="asc")
    assert [(c.step, c.trained) for c in page] == [(0, None), (1, True), (2, False), (3, None)]
    db.close()


def test_a_transaction_whose_commit_fails_is_rolled_back_and_holds_no_lock(tmp_path: Path) -> None:
    """A ``COMMIT`` refused ("SQL statements in progress": here a write statement whose rows were not
    all read) ends the transaction: nothing of it lands, and the file's write lock is free at once for
    other connections (left open, every later write failed with "database is locked")."""
    db = Database(tmp_path / "toolkit.db", MIGRATIONS)
    add = "INSERT INTO users (id, name, created_at) VALUES (?, ?, 'now')"
    with pytest.raises(sqlite3.OperationalError, match="statements in progress"), db.write() as conn:
        pending = conn.execute(
            "INSERT INTO users (id, name, created_at) VALUES ('a', 'a', 'now'), ('b', 'b', 'now')"
            " RETURNING id"
        )
        assert pending.fetchone() is not None  # the second row unread: the INSERT is still running
    other = sqlite3.connect(tmp_path / "toolkit.db", timeout=0.5, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # "database is locked" after 0.5 s were the transaction still open
    other.execute(add, ("c", "c"))
    other.execute("COMMIT")
    with db.write() as conn:  # the thread whose commit failed writes again
        conn.execute(add, ("d", "d"))
    assert [r[0] for r in db.conn.execute("SELECT id FROM users ORDER BY id")] == ["c", "d"]
