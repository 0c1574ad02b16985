"""Training jobs and their events, scoped to the user who owns them.

A job moves ``queued -> running -> succeeded | failed | cancelled`` (``queued -> cancelled`` and
``queued -> failed`` too). Every move to a terminal state writes the job's one terminal event in the
same transaction, so a reader never sees a finished job without its event, nor the reverse.

The queue: one worker runs the jobs of every user in submission order (``created_at``, then row
order). A job created behind others gets a ``queued`` event ``{"ahead": N}`` (the running job and
the queued ones before it), and a new one whenever a job ahead of it ends and it still waits behind
some; its ``queue_position`` counts the queued jobs before it (0: it runs next).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ...types.job_warnings import DUPLICATE_JOB, WarningCode
from ...types.training import EventType, JobKind, TrainingJob, TrainingJobEvent
from ..errors import Conflict, NotFound, Unprocessable
from .common import new_id, now_iso
from .db import Database
from .users import User

TERMINAL = ("succeeded", "failed", "cancelled")
_QUEUE_ORDER = "ORDER BY created_at, rowid"  # the order the worker runs queued jobs in


@dataclass(frozen=True)
class JobRow:
    """What the runner needs of a job."""

    id: str
    model_id: str
    kind: JobKind
    status: str
    request: str | None  # the request as JSON (gone once the job has ended)


def _job(row: sqlite3.Row, queue: list[str]) -> TrainingJob:
    """The job of ``row``; ``queue``: the ids of the queued jobs in the order they will run."""
    return TrainingJob(
        id=row["id"],
        model_id=row["model_id"],
        kind=row["kind"],
        status=row["status"],
        created_at=row["created_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        base_step=row["base_step"],
        result_step=row["result_step"],
        checkpoint_id=row["checkpoint_id"],
        num_sequences=row["num_sequences"],
        error=row["error"],
        queue_position=queue.index(row["id"]) if row["status"] == "queued" and row["id"] in queue else None,
    )


def _event(row: sqlite3.Row) -> TrainingJobEvent:
    return TrainingJobEvent(
        id=row["id"], type=row["type"], data=json.loads(row["data"]), created_at=row["created_at"]
    )


class Jobs:
    def __init__(self, db: Database) -> None:
        self.db = db

    # ------------------------------------------------------------------ jobs

    def create(
        self,
        user: User,
        model_id: str,
        kind: JobKind,
        request: str,
        *,
        twin: Callable[[str], bool] | None = None,
    ) -> str:
        """A queued job; ``request`` is the JSON the runner reads back after a restart. Created behind
        other jobs, it gets a ``queued`` event saying how many. With ``twin`` (whether a stored request
        trains what this one would), a job of the same model and kind still queued or running whose
        request is a twin is a 409 naming it: a re-run cell would train the model twice."""
        job_id = new_id()
        with self.db.write() as conn:
            if twin is not None:
                self._refuse_twin(conn, user, model_id, kind, twin)
            conn.execute(
                "INSERT INTO training_jobs (id, user_id, model_id, kind, status, request, created_at)"
                " VALUES (?, ?, ?, ?, 'queued', ?, ?)",
                (job_id, user.id, model_id, kind, request, now_iso()),
            )
            self._queue_moved(conn)
        return job_id

    @staticmethod
    def _refuse_twin(
        conn: sqlite3.Connection, user: User, model_id: str, kind: JobKind, twin: Callable[[str], bool]
    ) -> None:
        rows = conn.execute(
            "SELECT id, status, request FROM training_jobs WHERE user_id = ? AND model_id = ? AND kind = ?"
            f" AND status IN ('queued', 'running') {_QUEUE_ORDER}",
            (user.id, model_id, kind),
        )
        same = next((r for r in rows if r["request"] and twin(r["request"])), None)
        if same is not None:
            raise Conflict(DUPLICATE_JOB.format(job_id=same["id"], status=same["status"], model_id=model_id))

    def get(self, user: User, job_id: str) -> TrainingJob:
        row = self.db.conn.execute(
            "SELECT * FROM training_jobs WHERE id = ? AND user_id = ?", (job_id, user.id)
        ).fetchone()
        if row is None:
            raise NotFound(f"Training job {job_id} not found")
        return _job(row, self._queue(self.db.conn) if row["status"] == "queued" else [])

    def all(self, user: User, model_id: str | None) -> list[TrainingJob]:
        sql = "SELECT * FROM training_jobs WHERE user_id = ?"
        args: list[str] = [user.id]
        if model_id is not None:
            sql += " AND model_id = ?"
            args.append(model_id)
        rows = self.db.conn.execute(sql + " ORDER BY created_at", args).fetchall()
        queue = self._queue(self.db.conn) if any(r["status"] == "queued" for r in rows) else []
        return [_job(r, queue) for r in rows]

    def row(self, job_id: str) -> JobRow | None:
        row = self.db.conn.execute("SELECT * FROM training_jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            return None
        return JobRow(row["id"], row["model_id"], row["kind"], row["status"], row["request"] or None)

    def ids_with_status(self, status: str) -> list[str]:
        rows = self.db.conn.execute(
            f"SELECT id FROM training_jobs WHERE status = ? {_QUEUE_ORDER}", (status,)
        )
        return [r["id"] for r in rows]

    # ------------------------------------------------------------------ the queue

    @staticmethod
    def _queue(conn: sqlite3.Connection) -> list[str]:
        """The ids of the queued jobs (of every user), in the order the worker will run them."""
        return [
            r["id"]
            for r in conn.execute(f"SELECT id FROM training_jobs WHERE status = 'queued' {_QUEUE_ORDER}")
        ]

    def _queue_moved(self, conn: sqlite3.Connection) -> None:
        """Inside a transaction that added or ended a job: a ``queued {ahead}`` event for each queued
        job whose number of jobs ahead (the running one, then the queued before it) is not what its
        last ``queued`` event said; none once it runs next with nothing ahead."""
        running = conn.execute("SELECT COUNT(*) FROM training_jobs WHERE status = 'running'").fetchone()[0]
        rows = conn.execute(
            "SELECT id, (SELECT e.data FROM training_job_events e WHERE e.job_id = training_jobs.id"
            " AND e.type = 'queued' ORDER BY e.seq DESC LIMIT 1) AS said"
            f" FROM training_jobs WHERE status = 'queued' {_QUEUE_ORDER}"
        ).fetchall()
        for position, row in enumerate(rows):
            ahead = running + position
            said = json.loads(row["said"])["ahead"] if row["said"] else 0
            if ahead != said and ahead > 0:
                self._add_event(conn, row["id"], "queued", {"ahead": ahead})

    def start(self, job_id: str, base_step: int) -> bool:
        """``queued -> running``; False when the job is no longer queued (cancelled meanwhile)."""
        with self.db.write() as conn:
            cur = conn.execute(
                "UPDATE training_jobs SET status = 'running', started_at = ?, base_step = ?"
                " WHERE id = ? AND status = 'queued'",
                (now_iso(), base_step, job_id),
            )
            return cur.rowcount == 1

    def started(
        self,
        job_id: str,
        num_sequences: int,
        warnings: Sequence[str] = (),
        config: dict[str, Any] | None = None,
    ) -> None:
        """Record the number of gradient steps and write ``training_started`` (with the job's
        ``warnings``, when it has some, and the ``config`` it trains with, every default filled in)."""
        data: dict[str, Any] = {"num_sequences": num_sequences}
        if warnings:
            data["warnings"] = list(warnings)
        if config is not None:
            data["config"] = config
        with self.db.write() as conn:
            conn.execute("UPDATE training_jobs SET num_sequences = ? WHERE id = ?", (num_sequences, job_id))
            self._add_event(conn, job_id, "training_started", data)

    def add_event(self, job_id: str, type_: EventType, data: dict[str, Any]) -> None:
        with self.db.write() as conn:
            self._add_event(conn, job_id, type_, data)

    def warn(self, job_id: str, code: WarningCode, message: str) -> None:
        """A ``warning`` event: ``code`` (types/job_warnings.py) and a one-line ``message``."""
        self.add_event(job_id, "warning", {"code": code, "message": message})

    def _add_event(
        self, conn: sqlite3.Connection, job_id: str, type_: EventType, data: dict[str, Any]
    ) -> None:
        conn.execute(
            "INSERT INTO training_job_events (id, job_id, type, data, created_at) VALUES (?, ?, ?, ?, ?)",
            (new_id(), job_id, type_, json.dumps(data), now_iso()),
        )

    def succeed(
        self, conn: sqlite3.Connection, job_id: str, step: int, checkpoint_id: str, *, trained: bool = True
    ) -> None:
        """Inside the transaction that inserted the checkpoint: ``training_ended`` and ``succeeded``;
        ``trained`` says whether the job changed the weights."""
        conn.execute(
            "UPDATE training_jobs SET status = 'succeeded', finished_at = ?, result_step = ?,"
            " checkpoint_id = ?, request = NULL WHERE id = ?",
            (now_iso(), step, checkpoint_id, job_id),
        )
        ended = {"step": step, "checkpoint_id": checkpoint_id, "trained": trained}
        self._add_event(conn, job_id, "training_ended", ended)
        self._queue_moved(conn)

    def fail(self, job_id: str, message: str, status: str = "failed") -> bool:
        """End a job that has not ended yet with ``training_failed``; False if it had already ended."""
        with self.db.write() as conn:
            cur = conn.execute(
                "UPDATE training_jobs SET status = ?, finished_at = ?, error = ?, request = NULL"
                f" WHERE id = ? AND status NOT IN {TERMINAL!r}",
                (status, now_iso(), message, job_id),
            )
            if cur.rowcount != 1:
                return False
            self._add_event(conn, job_id, "training_failed", {"error_message": message})
            self._queue_moved(conn)
            return True

    # ------------------------------------------------------------------ events

    def event_page(
        self, user: User, job_id: str, *, after: str | None, limit: int
    ) -> tuple[list[TrainingJobEvent], bool]:
        self.get(user, job_id)
        sql = "SELECT * FROM training_job_events WHERE job_id = ?"
        args: list[object] = [job_id]
        if after is not None:
            cursor = self.db.conn.execute(
                "SELECT seq FROM training_job_events WHERE id = ? AND job_id = ?", (after, job_id)
            ).fetchone()
            if cursor is None:
                raise Unprocessable(["query", "after"], f"No event with id {after!r} in this job")
            sql += " AND seq > ?"
            args.append(cursor["seq"])
        rows = self.db.conn.execute(sql + " ORDER BY seq LIMIT ?", [*args, limit + 1]).fetchall()
        return [_event(r) for r in rows[:limit]], len(rows) > limit
