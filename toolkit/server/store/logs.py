"""Stored trajectories: the groups of ``/log`` (and the metrics they roll up into) and the groups RL
jobs train on, with the advantage each job used; listed with filters and cursor pages."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ...types.training import LogRequest, LogResponse, TrajectoryGroup
from ..errors import Unprocessable
from .common import now_iso
from .db import Database
from .models import Models
from .trajectory_facts import TrajectoryFacts, group_error, trajectory_facts

COLUMNS = (
    "id, model_id, group_id, idx, split, step, reward, advantage, data, prompt_tokens, completion_tokens,"
    " truncated, error, prompt_key, trace_call_id, trained_step, job_id"
)


@dataclass
class LoggedGroup:
    """One logged group as it is read back to compute its split's metrics."""

    rewards: list[float]
    trajectory_metrics: list[dict[str, object]]
    group_metrics: dict[str, object]
    num_exceptions: int


Rollup = Callable[[str, Sequence[LoggedGroup]], dict[str, float]]
"""The metrics of a split at a step from all its logged groups (the training room's ``/log`` metrics)."""


@dataclass(frozen=True)
class TrajectoryFilter:
    """Which stored trajectories a listing returns (every field narrows; None/False: no filter)."""

    split: str | None = None
    step: int | None = None
    step_min: int | None = None
    step_max: int | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    zero_std_only: bool = False
    truncated_only: bool = False
    errors_only: bool = False
    search: str | None = None
    prompt_key: str | None = None

    def where(self) -> tuple[str, list[object]]:
        conditions = [
            ("split = ?", self.split),
            ("step = ?", self.step),
            ("step >= ?", self.step_min),
            ("step <= ?", self.step_max),
            ("reward >= ?", self.reward_min),
            ("reward <= ?", self.reward_max),
            ("prompt_key = ?", self.prompt_key),
            ("zero_std = 1", None if not self.zero_std_only else True),
            ("truncated = 1", None if not self.truncated_only else True),
            ("error IS NOT NULL", None if not self.errors_only else True),
        ]
        sql, args = "", list[object]()
        for condition, value in conditions:
            if value is not None:
                sql += f" AND {condition}"
                args += [value] if "?" in condition else []
        if self.search:
            escaped = self.search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            sql += " AND search_text LIKE ? ESCAPE '\\'"
            args.append(f"%{escaped}%")
        return sql, args


@dataclass
class GroupRows:
    """One group to store: the trajectories to insert (with their index in the group and facts) and
    what a job computed from them (advantages; None for logged-only groups)."""

    group: TrajectoryGroup
    members: list[tuple[int, TrajectoryFacts]]
    advantages: list[float | None]
    zero_std: bool

    @classmethod
    def logged(cls, group: TrajectoryGroup) -> GroupRows:
        error = group_error(group.exceptions)
        members = [(i, trajectory_facts(t, error)) for i, t in enumerate(group.trajectories)]
        rewards = [t.reward for t in group.trajectories]
        zero_std = bool(rewards) and min(rewards) == max(rewards)
        return cls(group, members, [None] * len(members), zero_std)

    def rows(
        self, model_id: str, split: str, step: int, group_id: int, trained: tuple[int, str] | None
    ) -> list[tuple[object, ...]]:
        trained_step, job_id = trained if trained is not None else (None, None)
        return [
            (
                *(group_id, model_id, split, step, self.group.trajectories[i].reward, f.data, i),
                *(f.prompt_tokens, f.completion_tokens, f.truncated, f.error, f.prompt_key),
                *(f.trace_call_id, f.content_hash, self.zero_std, f.search_text),
                *(advantage, trained_step, job_id, f.metrics),
            )
            for (i, f), advantage in zip(self.members, self.advantages, strict=True)
        ]


INSERT = (
    "INSERT INTO trajectories (group_id, model_id, split, step, reward, data, idx, prompt_tokens,"
    " completion_tokens, truncated, error, prompt_key, trace_call_id, content_hash, zero_std, search_text,"
    " advantage, trained_step, job_id, metrics)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


class TrajectoryLogs:
    def __init__(self, db: Database, models: Models, rollup: Rollup) -> None:
        self.db = db
        self.models = models
        self.rollup = rollup

    def log(self, model_id: str, req: LogRequest) -> LogResponse:
        """Store the groups at the model's current step (or the request's ``step``) and recompute that
        step's split metrics; the answer comes after the commit (acknowledged = stored)."""
        groups = [GroupRows.logged(g) for g in req.trajectory_groups]  # read before taking the lock
        with self.db.write() as conn:
            if req.step is None:
                checkpoint = self.models.latest_checkpoint(model_id)
            elif (found := self.models.checkpoint_at(model_id, req.step)) is not None:
                checkpoint = found
            else:
                raise Unprocessable(
                    ["body", "step"], f"Model {model_id} has no checkpoint at step {req.step}"
                )
            self._insert(conn, model_id, req.split, checkpoint.step, groups, None)
            metrics = self.rollup(req.split, self._groups(model_id, req.split, checkpoint.step))
            self.models.merge_metrics(conn, checkpoint.id, metrics)
        return LogResponse(
            model_id=model_id,
            split=req.split,
            step=checkpoint.step,
            checkpoint_id=checkpoint.id,
            num_groups=len(req.trajectory_groups),
            num_trajectories=sum(len(g.trajectories) for g in req.trajectory_groups),
            metrics=metrics,
        )

    def _insert(
        self,
        conn: sqlite3.Connection,
        model_id: str,
        split: str,
        step: int,
        groups: Sequence[GroupRows],
        trained: tuple[int, str] | None,
    ) -> None:
        """One row per group, then every trajectory in one ``executemany``; ``trained`` is the
        (step produced, job id) of the job that stores them."""
        now = now_iso()
        job_id = trained[1] if trained is not None else None
        rows: list[tuple[object, ...]] = []
        for g in groups:
            group_data = g.group.model_dump(mode="json", exclude={"trajectories"})
            group_id = conn.execute(
                "INSERT INTO log_groups (model_id, split, step, num_trajectories, num_exceptions, data,"
                " created_at, job_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                (
                    model_id,
                    split,
                    step,
                    len(g.members),
                    len(g.group.exceptions),
                    json.dumps(group_data),
                    now,
                    job_id,
                ),
            ).fetchone()[0]
            rows += g.rows(model_id, split, step, group_id, trained)
        conn.executemany(INSERT, rows)

    def record_training(
        self,
        conn: sqlite3.Connection,
        model_id: str,
        job_id: str,
        step: int,
        trained_step: int,
        groups: Sequence[TrajectoryGroup],
        advantages: Sequence[Sequence[float]],
    ) -> None:
        """Inside the job's final transaction: each trajectory the job trained on gets the advantage
        the job used and the step it produced. A trajectory logged with split ``train`` (as ART logs
        before it trains) at or before the job's base ``step`` is that row, linked by its exact JSON;
        the others become new rows with split ``train`` at ``step``, in groups of their own
        (``log_groups.job_id``). ``/log`` never rolls them up: the job moves the model past ``step``
        in this same transaction, and ``/log`` writes at the current step only."""
        claimed: set[int] = set()
        updates: list[tuple[object, ...]] = []
        new: list[GroupRows] = []
        for group, group_advantages in zip(groups, advantages, strict=True):
            rows = GroupRows.logged(group)
            unlinked = []
            for (i, f), advantage in zip(rows.members, group_advantages, strict=True):
                row = self._logged_row(conn, model_id, f.content_hash, step, claimed)
                if row is None:
                    unlinked.append(((i, f), advantage))
                else:
                    claimed.add(row)
                    updates.append((advantage, trained_step, job_id, row))
            if unlinked:
                rows.members = [m for m, _ in unlinked]
                rows.advantages = [a for _, a in unlinked]
                new.append(rows)
        conn.executemany(
            "UPDATE trajectories SET advantage = ?, trained_step = ?, job_id = ? WHERE id = ?", updates
        )
        self._insert(conn, model_id, "train", step, new, (trained_step, job_id))

    @staticmethod
    def _logged_row(
        conn: sqlite3.Connection, model_id: str, content_hash: str, step: int, claimed: set[int]
    ) -> int | None:
        """The newest untrained ``train`` row of this exact trajectory logged at or before ``step``.
        Looked up by its content (SQLite's planner would otherwise walk every row of the model up to
        ``step`` by the step index, once per trajectory: a job's cost would grow with the run)."""
        for row in conn.execute(
            "SELECT id FROM trajectories INDEXED BY trajectories_by_content"
            " WHERE model_id = ? AND content_hash = ? AND split = 'train'"
            " AND trained_step IS NULL AND step <= ? ORDER BY step DESC, id ASC",
            (model_id, content_hash, step),
        ):
            if row[0] not in claimed:
                return int(row[0])
        return None

    def _groups(self, model_id: str, split: str, step: int) -> list[LoggedGroup]:
        conn = self.db.conn
        groups = conn.execute(
            "SELECT id, num_exceptions, data FROM log_groups WHERE model_id = ? AND split = ? AND step = ?",
            (model_id, split, step),
        ).fetchall()
        rows = conn.execute(
            "SELECT group_id, reward, metrics FROM trajectories"
            " WHERE model_id = ? AND split = ? AND step = ?",
            (model_id, split, step),
        ).fetchall()
        by_group: dict[int, list[tuple[float, dict[str, object]]]] = {}
        for row in rows:
            by_group.setdefault(row["group_id"], []).append(
                (row["reward"], json.loads(row["metrics"] or "{}"))
            )
        out = []
        for g in groups:
            members = by_group.get(g["id"], [])
            out.append(
                LoggedGroup(
                    [r for r, _ in members],
                    [m for _, m in members],
                    json.loads(g["data"]).get("metrics", {}),
                    g["num_exceptions"],
                )
            )
        return out

    def step_of(self, model_id: str, trajectory_id: int) -> int | None:
        """The step of one of the model's trajectories (a cursor's position), None if not its."""
        row = self.db.conn.execute(
            "SELECT step FROM trajectories WHERE id = ? AND model_id = ?", (trajectory_id, model_id)
        ).fetchone()
        return None if row is None else int(row[0])

    def query_json(
        self,
        model_id: str,
        where: TrajectoryFilter = TrajectoryFilter(),
        *,
        limit: int = 100,
        offset: int = 0,
        after: tuple[int, int] | None = None,
    ) -> str:
        """A page of stored trajectories as the JSON array the route answers, newest step first (then
        in storing order); ``after`` is the cursor ``(step, id)`` of the last item of the previous
        page. Each trajectory's stored JSON is spliced in as it is (never parsed on the way out)."""
        conditions, args = where.where()
        sql = f"SELECT {COLUMNS} FROM trajectories WHERE model_id = ?{conditions}"
        if after is not None:
            sql += " AND (step < ? OR (step = ? AND id > ?))"
            args += [after[0], after[0], after[1]]
        sql += " ORDER BY step DESC, id ASC LIMIT ? OFFSET ?"
        rows = self.db.conn.execute(sql, (model_id, *args, limit, offset)).fetchall()
        items = []
        for r in rows:
            fields = {
                "id": r["id"],
                "model_id": r["model_id"],
                "group_id": r["group_id"],
                "index": r["idx"],
                "split": r["split"],
                "step": r["step"],
                "reward": r["reward"],
                "advantage": r["advantage"],
                "prompt_tokens": r["prompt_tokens"],
                "completion_tokens": r["completion_tokens"],
                "truncated": bool(r["truncated"]),
                "error": r["error"],
                "prompt_key": r["prompt_key"],
                "trace_call_id": r["trace_call_id"],
                "trained_step": r["trained_step"],
                "job_id": r["job_id"],
            }
            items.append(f'{json.dumps(fields)[:-1]}, "trajectory": {r["data"]}}}')
        return f"[{', '.join(items)}]"
