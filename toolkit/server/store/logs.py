"""Logged trajectories (``/log``) and the metrics they roll up into."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ...types.training import LogRequest, LogResponse
from .common import now_iso
from .db import Database
from .models import Models


@dataclass
class LoggedGroup:
    """One logged group as it is read back to compute its split's metrics."""

    rewards: list[float]
    trajectory_metrics: list[dict[str, object]]
    group_metrics: dict[str, object]
    num_exceptions: int


Rollup = Callable[[str, Sequence[LoggedGroup]], dict[str, float]]
"""The metrics of a split at a step from all its logged groups (the training room's ``/log`` metrics)."""


class TrajectoryLogs:
    def __init__(self, db: Database, models: Models, rollup: Rollup) -> None:
        self.db = db
        self.models = models
        self.rollup = rollup

    def log(self, model_id: str, req: LogRequest) -> LogResponse:
        """Store the groups at the model's current step and recompute that step's split metrics."""
        with self.db.write() as conn:
            checkpoint = self.models.latest_checkpoint(model_id)
            now = now_iso()
            for group in req.trajectory_groups:
                group_data = group.model_dump(mode="json", exclude={"trajectories"})
                cur = conn.execute(
                    "INSERT INTO log_groups (model_id, split, step, num_trajectories, num_exceptions, data,"
                    " created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        model_id,
                        req.split,
                        checkpoint.step,
                        len(group.trajectories),
                        len(group.exceptions),
                        json.dumps(group_data),
                        now,
                    ),
                )
                conn.executemany(
                    "INSERT INTO trajectories (group_id, model_id, split, step, reward, data)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    [
                        (cur.lastrowid, model_id, req.split, checkpoint.step, t.reward, t.model_dump_json())
                        for t in group.trajectories
                    ],
                )
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

    def _groups(self, model_id: str, split: str, step: int) -> list[LoggedGroup]:
        conn = self.db.conn
        groups = conn.execute(
            "SELECT id, num_exceptions, data FROM log_groups WHERE model_id = ? AND split = ? AND step = ?",
            (model_id, split, step),
        ).fetchall()
        rows = conn.execute(
            "SELECT group_id, reward, json_extract(data, '$.metrics') AS metrics FROM trajectories"
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

    def query(
        self,
        model_id: str,
        *,
        split: str | None = None,
        step: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[dict[str, object]]:
        """Logged trajectories with their split, step and group id (newest step first)."""
        sql = "SELECT id, group_id, split, step, reward, data FROM trajectories WHERE model_id = ?"
        args: list[object] = [model_id]
        for column, value in (("split", split), ("step", step)):
            if value is not None:
                sql += f" AND {column} = ?"
                args.append(value)
        sql += " ORDER BY step DESC, id ASC LIMIT ? OFFSET ?"
        rows = self.db.conn.execute(sql, (*args, limit, offset)).fetchall()
        return [
            {
                "id": r["id"],
                "group_id": r["group_id"],
                "split": r["split"],
                "step": r["step"],
                "reward": r["reward"],
                "trajectory": json.loads(r["data"]),
            }
            for r in rows
        ]
