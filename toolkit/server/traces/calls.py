"""Calls: ingest (start, end, complete, batches), reads built as JSON in SQL, streamed queries,
stats, soft deletes with descendants, display-name updates."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from ...types.common import INT64_MAX
from ...types.traces import (
    CallsQueryReq,
    CompletedCall,
    EndedCall,
    StartedCall,
)
from ..errors import BadRequest, NotFound, PayloadTooLarge
from .call_query import select_sql, where_sql
from .call_rows import INSERT_FULL, INSERT_START, UPDATE_END, check_names, end_values, merge_end, start_row
from .common import now_us
from .store import Base

MAX_DELETE = 1000


class Calls:
    def __init__(self, base: Base) -> None:
        self.base = base

    # ------------------------------------------------------------------ writes

    def upsert_batch(self, user_id: str, items: Sequence[tuple[str, Any]]) -> list[dict[str, str]]:
        """Starts and ends in order (``("start", StartedCall)`` or ``("end", EndedCall)``, or objects
        with the same attributes), in one transaction; an end whose start is in the same batch is
        folded into its row, so each call is written once."""
        results: list[dict[str, str]] = []
        rows: dict[tuple[int, str], list[Any]] = {}
        ends: list[tuple[Any, ...]] = []
        pids: dict[str, int] = {}
        with self.base.db.write() as conn:
            for mode, item in items:
                if mode == "start":
                    start = item
                    pid = pids.get(start.project_id) or pids.setdefault(
                        start.project_id, self._pid(user_id, start.project_id)
                    )
                    row = start_row(pid, start, user_id)
                    rows[(pid, row[1])] = row
                    results.append({"id": row[1], "trace_id": row[2]})
                else:
                    end = item
                    pid = pids.get(end.project_id) or pids.setdefault(
                        end.project_id, self._pid(user_id, end.project_id)
                    )
                    values = end_values(end)
                    pending = rows.get((pid, end.id))
                    if pending is not None:
                        merge_end(pending, values, end.project_id)
                    else:
                        ends.append((*values, pid, end.id))
                    results.append({})
            full = [r for r in rows.values() if r[10] is not None]
            if full:
                conn.executemany(INSERT_FULL, full)
            if len(full) < len(rows):
                conn.executemany(INSERT_START, [r for r in rows.values() if r[10] is None])
            if ends:
                conn.executemany(UPDATE_END, ends)
        return results

    def start(self, user_id: str, start: StartedCall) -> dict[str, str]:
        with self.base.db.write() as conn:
            row = start_row(self._pid(user_id, start.project_id), start, user_id)
            conn.execute(INSERT_START, row)
        return {"id": row[1], "trace_id": row[2]}

    def end(self, user_id: str, end: EndedCall) -> None:
        with self.base.db.write() as conn:
            conn.execute(UPDATE_END, (*end_values(end), self._pid(user_id, end.project_id), end.id))

    def complete(self, user_id: str, calls: Sequence[CompletedCall]) -> None:
        """Whole calls (``/v2/.../calls/complete``, OTel export, tracked completions)."""
        with self.base.db.write() as conn:
            batch = []
            for call in calls:
                row = start_row(self._pid(user_id, call.project_id), call, user_id)
                merge_end(row, end_values(call), call.project_id)
                batch.append(row)
            conn.executemany(INSERT_FULL, batch)

    def update(self, user_id: str, project_id: str, call_id: str, display_name: str | None) -> None:
        if display_name is None:
            raise BadRequest("One of [display_name] is required for call update")
        check_names("x", display_name)
        pid = self.base.pid(user_id, project_id)
        with self.base.db.write() as conn:
            cur = conn.execute(
                "UPDATE calls SET display_name = ?, line = NULL"
                " WHERE pid = ? AND id = ? AND deleted_at IS NULL",
                (display_name, pid, call_id),
            )
        if cur.rowcount == 0:
            raise NotFound(f"Call not found: {call_id}")

    def delete(self, user_id: str, project_id: str, call_ids: Sequence[str]) -> int:
        """Soft-delete the calls and all their descendants; the number of calls deleted."""
        if len(call_ids) > MAX_DELETE:
            raise PayloadTooLarge(f"Cannot delete more than {MAX_DELETE} calls at once")
        pid = self.base.pid(user_id, project_id)
        if pid is None or not call_ids:
            return 0
        marks = ", ".join("?" * len(call_ids))
        with self.base.db.write() as conn:
            conn.execute(
                "WITH RECURSIVE doomed(id) AS ("
                f" SELECT id FROM calls WHERE pid = ? AND id IN ({marks}) AND deleted_at IS NULL"
                " UNION SELECT c.id FROM calls c JOIN doomed d ON c.pid = ? AND c.parent_id = d.id"
                " WHERE c.deleted_at IS NULL)"
                " UPDATE calls SET deleted_at = ? WHERE pid = ? AND id IN (SELECT id FROM doomed)",
                (pid, *call_ids, pid, now_us(), pid),
            )
            return int(conn.execute("SELECT changes()").fetchone()[0])

    def _pid(self, user_id: str, project_id: str) -> int:
        pid = self.base.pid(user_id, project_id, create=True)
        assert pid is not None
        return pid

    # ------------------------------------------------------------------ reads

    def stream(self, user_id: str, req: CallsQueryReq) -> Iterator[list[bytes]]:
        """Chunks of calls as JSON (UTF-8 bytes), one per call, read with a connection of its own."""
        pid = self.base.pid(user_id, req.project_id)
        if pid is None:
            return iter(())
        sql, params = select_sql(pid, req)
        return self.base.rows(sql, params)

    def count(self, user_id: str, req: CallsQueryReq, limit: int | None) -> tuple[int, bool]:
        """How many calls match (at most ``limit``) and whether more than ``limit`` do."""
        pid = self.base.pid(user_id, req.project_id)
        if pid is None:
            return 0, False
        where, params = where_sql(pid, req)
        if limit is None:
            row = self.base.db.conn.execute(f"SELECT count(*) FROM calls c WHERE {where}", params).fetchone()
            return int(row[0]), False
        probe = min(limit, INT64_MAX - 1) + 1  # one more than asked tells whether there are more
        row = self.base.db.conn.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM calls c WHERE {where} LIMIT ?)", (*params, probe)
        ).fetchone()
        return min(int(row[0]), limit), int(row[0]) > limit
