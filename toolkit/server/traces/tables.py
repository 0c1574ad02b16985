"""Tables: rows stored once by content digest, tables as ordered lists of row digests; created,
updated by append / insert / pop, queried (sorted, filtered, paged) and counted."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

from ...types.traces import TableQueryReq, TableUpdate
from ..errors import BadRequest, Conflict, NotFound
from .common import dumps, loads
from .digests import table_digest, value_digest
from .query import Expr, json_path, order_by
from .store import Base


class Tables:
    def __init__(self, base: Base) -> None:
        self.base = base

    def create(
        self, user_id: str, project_id: str, rows: Sequence[dict[str, Any]], expected: str | None
    ) -> tuple[str, list[str]]:
        row_digests = [value_digest(r) for r in rows]
        digest = table_digest(row_digests)
        if expected is not None and expected != digest:
            raise Conflict(f"Digest mismatch: expected {expected}, computed {digest}")
        pid = self.base.pid(user_id, project_id, create=True)
        with self.base.db.write() as conn:
            self._store(conn, pid, digest, row_digests, zip(row_digests, rows, strict=True))
        return digest, row_digests

    def _store(
        self,
        conn: sqlite3.Connection,
        pid: int | None,
        digest: str,
        row_digests: list[str],
        new_rows: Any,
    ) -> None:
        conn.executemany(
            "INSERT OR IGNORE INTO table_rows (pid, digest, val) VALUES (?, ?, ?)",
            ((pid, d, dumps(r)) for d, r in new_rows),
        )
        conn.execute(
            "INSERT OR IGNORE INTO tables (pid, digest, row_digests) VALUES (?, ?, ?)",
            (pid, digest, dumps(row_digests)),
        )

    def row_digests(self, pid: int | None, digest: str) -> list[str]:
        row = None
        if pid is not None:
            row = self.base.db.conn.execute(
                "SELECT row_digests FROM tables WHERE pid = ? AND digest = ?", (pid, digest)
            ).fetchone()
        if row is None:
            raise NotFound(f"Table {digest} not found")
        return list(loads(row[0]))

    def row_value(self, pid: int | None, row_digest: str) -> tuple[bool, Any]:
        """``(True, value)`` of a stored row, ``(False, None)`` when there is none."""
        row = self.base.db.conn.execute(
            "SELECT val FROM table_rows WHERE pid = ? AND digest = ?", (pid, row_digest)
        ).fetchone()
        return (False, None) if row is None else (True, loads(row[0]))

    def update(
        self, user_id: str, project_id: str, base_digest: str, updates: Sequence[TableUpdate]
    ) -> tuple[str, list[str]]:
        pid = self.base.pid(user_id, project_id)
        digests = self.row_digests(pid, base_digest)
        new_rows: list[tuple[str, dict[str, Any]]] = []
        updated: list[str] = []
        for update in updates:
            if update.append is not None:
                d = value_digest(update.append.row)
                digests.append(d)
                new_rows.append((d, update.append.row))
                updated.append(d)
            elif update.insert is not None:
                index = update.insert.index
                if not 0 <= index <= len(digests):
                    raise BadRequest(f"Insert index {index} out of range")
                d = value_digest(update.insert.row)
                digests.insert(index, d)
                new_rows.append((d, update.insert.row))
                updated.append(d)
            elif update.pop is not None:
                index = update.pop.index
                if not 0 <= index < len(digests):
                    raise BadRequest(f"Pop index {index} out of range")
                updated.append(digests.pop(index))
            else:
                raise BadRequest("Each update needs one of append, pop, insert")
        digest = table_digest(digests)
        with self.base.db.write() as conn:
            self._store(conn, pid, digest, digests, new_rows)
        return digest, updated

    def rows(self, user_id: str, req: TableQueryReq) -> Iterator[list[str]]:
        """Chunks of ``{digest, val, original_index}`` rows as JSON text."""
        pid = self.base.pid(user_id, req.project_id)
        self.row_digests(pid, req.digest)
        parts = ["t.pid = ?", "t.digest = ?"]
        params: list[Any] = [pid, req.digest]
        if req.filter is not None and req.filter.row_digests is not None:
            parts.append(f"j.value IN ({', '.join('?' * len(req.filter.row_digests))})")
            params.extend(req.filter.row_digests)

        def resolve_row(path: str) -> Expr:
            if path in ("digest", "original_index"):
                return Expr("r.digest" if path == "digest" else "CAST(j.key AS INTEGER)")
            parts_ = path.split(".")
            if parts_[0] == "val":
                parts_ = parts_[1:]
            return Expr("json_extract(r.val, ?)", (json_path(parts_),))

        sort = [(s.field, s.direction) for s in req.sort_by or []]
        order, order_params = order_by(sort, resolve_row, "CAST(j.key AS INTEGER) ASC")
        sql = (
            "SELECT json_object('digest', r.digest, 'val', json(r.val),"
            " 'original_index', CAST(j.key AS INTEGER))"
            " FROM tables t, json_each(t.row_digests) j"
            " JOIN table_rows r ON r.pid = t.pid AND r.digest = j.value"
            f" WHERE {' AND '.join(parts)}{order} LIMIT ? OFFSET ?"
        )
        args = (*params, *order_params, req.limit if req.limit is not None else -1, req.offset or 0)
        return self.base.rows(sql, args)

    def count(self, user_id: str, project_id: str, digest: str) -> int:
        return len(self.row_digests(self.base.pid(user_id, project_id), digest))
