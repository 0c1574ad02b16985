"""Versioned objects (saved ops included): create by content digest, read by digest, ``latest`` or
``v<N>``, query, soft-delete."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from ...types.traces import ObjectVersionFilter, ObjForInsert
from ..errors import BadRequest, Conflict, NotFound
from .common import dumps, iso, loads, now_us
from .digests import value_digest
from .query import Fields, order_by
from .store import Base

MAX_OBJECT_ID = 128
MAX_DELETE_DIGESTS = 100
BASE_CLASSES = ("BaseObject", "Object")
OBJ_COLUMNS = (
    "object_id, digest, kind, base_object_class, leaf_object_class, val, version_index, is_latest,"
    " wb_user_id, created_at, deleted_at"
)


def object_kind(val: Any) -> str:
    """``"op"`` for a saved function (``CustomWeaveType`` of type ``Op``), else ``"object"``."""
    if isinstance(val, dict):
        if val.get("_type") == "Op":
            return "op"
        if val.get("_type") == "CustomWeaveType" and (val.get("weave_type") or {}).get("type") == "Op":
            return "op"
    return "object"


def object_classes(val: Any) -> tuple[str | None, str | None]:
    """(base, leaf) class of a serialized ``weave.Object``/``BaseObject``, from ``_bases``."""
    if not isinstance(val, dict) or not isinstance(val.get("_bases"), list):
        return None, None
    bases = val["_bases"]
    if len(bases) < 2 or bases[-1] != "BaseModel" or bases[-2] not in BASE_CLASSES:
        return None, None
    leaf = val.get("_class_name")
    return (bases[-3] if len(bases) > 2 else leaf), leaf


def _check_object_id(object_id: str) -> None:
    if not object_id or len(object_id) > MAX_OBJECT_ID:
        raise BadRequest(f"object_id must be 1 to {MAX_OBJECT_ID} characters")
    if not all(ch.isalnum() or ch in "._-" for ch in object_id):
        raise BadRequest("object_id may contain only letters, digits, '.', '_' and '-'")


def _obj_dict(row: sqlite3.Row, project_id: str, metadata_only: bool, tags: bool) -> dict[str, Any]:
    out = {
        "project_id": project_id,
        "object_id": row["object_id"],
        "created_at": iso(row["created_at"]),
        "deleted_at": iso(row["deleted_at"]),
        "digest": row["digest"],
        "version_index": row["version_index"],
        "is_latest": row["is_latest"],
        "kind": row["kind"],
        "base_object_class": row["base_object_class"],
        "leaf_object_class": row["leaf_object_class"],
        "val": {} if metadata_only else loads(row["val"]),
        "wb_user_id": row["wb_user_id"],
    }
    if tags:
        out["tags"], out["aliases"] = [], []
    return out


def _selector(selector: str) -> tuple[str, tuple[Any, ...]]:
    """SQL condition for ``latest``, ``v<N>`` or a digest."""
    if selector == "latest":
        return "is_latest = 1", ()
    if selector.startswith("v") and selector[1:].isdigit():
        return "version_index = ?", (int(selector[1:]),)
    return "digest = ?", (selector,)


class Objects:
    def __init__(self, base: Base) -> None:
        self.base = base

    # ------------------------------------------------------------------ objects

    def create(self, user_id: str, obj: ObjForInsert) -> str:
        _check_object_id(obj.object_id)
        val = obj.val
        requested = obj.builtin_object_class or obj.set_base_object_class
        base_class, leaf_class = object_classes(val)
        if requested:
            if not isinstance(val, dict):
                raise BadRequest("object_class cannot be provided for non-dict objects")
            if leaf_class is None:
                val = {**val, "_class_name": requested, "_bases": ["BaseObject", "BaseModel"]}
                base_class, leaf_class = object_classes(val)
            elif leaf_class != requested:
                raise BadRequest(
                    f"object_class must match val's defined object class: {leaf_class} != {requested}"
                )
        digest = value_digest(val)
        if obj.expected_digest is not None and obj.expected_digest != digest:
            raise Conflict(f"Digest mismatch: expected {obj.expected_digest}, computed {digest}")
        pid = self.base.pid(user_id, obj.project_id, create=True)
        with self.base.db.write() as conn:
            row = conn.execute(
                "SELECT deleted_at FROM objects WHERE pid = ? AND object_id = ? AND digest = ?",
                (pid, obj.object_id, digest),
            ).fetchone()
            if row is not None and row[0] is None:
                return digest
            if row is not None:
                conn.execute(
                    "DELETE FROM objects WHERE pid = ? AND object_id = ? AND digest = ?",
                    (pid, obj.object_id, digest),
                )
            count = conn.execute(
                "SELECT count(*) FROM objects WHERE pid = ? AND object_id = ?", (pid, obj.object_id)
            ).fetchone()[0]
            conn.execute(
                "UPDATE objects SET is_latest = 0 WHERE pid = ? AND object_id = ?", (pid, obj.object_id)
            )
            conn.execute(
                f"INSERT INTO objects (pid, {OBJ_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, NULL)",
                (
                    pid,
                    obj.object_id,
                    digest,
                    object_kind(val),
                    base_class,
                    leaf_class,
                    dumps(val),
                    count,
                    user_id,
                    now_us(),
                ),
            )
        return digest

    def version_row(self, pid: int | None, object_id: str, selector: str) -> sqlite3.Row:
        cond, params = _selector(selector)
        row = None
        if pid is not None:
            row = self.base.db.conn.execute(
                f"SELECT {OBJ_COLUMNS} FROM objects WHERE pid = ? AND object_id = ? AND {cond}"
                " ORDER BY deleted_at IS NULL DESC LIMIT 1",
                (pid, object_id, *params),
            ).fetchone()
        if row is None:
            raise NotFound(f"Obj {object_id}:{selector} not found")
        if row["deleted_at"] is not None:
            raise NotFound(
                f"Obj {object_id}:v{row['version_index']} was deleted at {iso(row['deleted_at'])}",
                deleted_at=iso(row["deleted_at"]),
            )
        return row

    def read(
        self, user_id: str, project_id: str, object_id: str, selector: str, metadata_only: bool, tags: bool
    ) -> dict[str, Any]:
        row = self.version_row(self.base.pid(user_id, project_id), object_id, selector)
        return _obj_dict(row, project_id, metadata_only, tags)

    def query(
        self,
        user_id: str,
        project_id: str,
        f: ObjectVersionFilter | None,
        limit: int | None,
        offset: int | None,
        sort: Sequence[tuple[str, str]],
        metadata_only: bool,
        tags: bool,
    ) -> list[dict[str, Any]]:
        pid = self.base.pid(user_id, project_id)
        if pid is None:
            return []
        parts = ["pid = ?", "deleted_at IS NULL"]
        params: list[Any] = [pid]
        if f is not None:
            for values, column in (
                (f.base_object_classes, "base_object_class"),
                (f.leaf_object_classes, "leaf_object_class"),
                (f.object_ids, "object_id"),
            ):
                if values is not None:
                    parts.append(f"{column} IN ({', '.join('?' * len(values))})" if values else "0")
                    params.extend(values)
            if f.exclude_base_object_classes:
                marks = ", ".join("?" * len(f.exclude_base_object_classes))
                parts.append(f"(base_object_class IS NULL OR base_object_class NOT IN ({marks}))")
                params.extend(f.exclude_base_object_classes)
            if f.is_op is not None:
                parts.append("kind = ?")
                params.append("op" if f.is_op else "object")
            if f.latest_only:
                parts.append("is_latest = 1")
            if f.tags or f.aliases:
                parts.append("0")
        fields = Fields(columns={"object_id": "object_id"}, times={"created_at": "created_at"})
        order, order_params = (
            order_by(list(sort), fields, "version_index ASC")
            if sort
            else (
                " ORDER BY created_at ASC, version_index ASC",
                (),
            )
        )
        sql = f"SELECT {OBJ_COLUMNS} FROM objects WHERE {' AND '.join(parts)}{order} LIMIT ? OFFSET ?"
        rows = self.base.db.conn.execute(
            sql, (*params, *order_params, limit if limit is not None else -1, offset or 0)
        )
        return [_obj_dict(r, project_id, metadata_only, tags) for r in rows]

    def delete(
        self, user_id: str, project_id: str, object_id: str, digests: Sequence[str] | None
    ) -> list[dict[str, Any]]:
        if digests is not None and len(digests) > MAX_DELETE_DIGESTS:
            raise BadRequest(f"Object delete request contains {len(digests)} digests; the limit is 100")
        pid = self.base.pid(user_id, project_id)
        with self.base.db.write() as conn:
            rows: list[sqlite3.Row] = []
            if pid is not None and digests is None:
                rows = conn.execute(
                    f"SELECT {OBJ_COLUMNS} FROM objects WHERE pid = ? AND object_id = ?"
                    " AND deleted_at IS NULL",
                    (pid, object_id),
                ).fetchall()
            elif pid is not None and digests:
                for selector in digests:
                    cond, params = _selector(selector)
                    row = conn.execute(
                        f"SELECT {OBJ_COLUMNS} FROM objects WHERE pid = ? AND object_id = ? AND {cond}"
                        " AND deleted_at IS NULL",
                        (pid, object_id, *params),
                    ).fetchone()
                    if row is None:
                        raise NotFound(f"Object {object_id}:{selector} not found")
                    rows.append(row)
            if not rows:
                raise NotFound(f"Object {object_id} not found")
            conn.executemany(
                "UPDATE objects SET deleted_at = ?, is_latest = 0"
                " WHERE pid = ? AND object_id = ? AND digest = ?",
                [(now_us(), pid, object_id, r["digest"]) for r in rows],
            )
            conn.execute(
                "UPDATE objects SET is_latest = 1 WHERE pid = ? AND object_id = ? AND version_index = ("
                " SELECT max(version_index) FROM objects"
                " WHERE pid = ? AND object_id = ? AND deleted_at IS NULL)"
                " AND deleted_at IS NULL",
                (pid, object_id, pid, object_id),
            )
        return [
            {
                "digest": r["digest"],
                "base_object_class": r["base_object_class"],
                "leaf_object_class": r["leaf_object_class"],
            }
            for r in {r["digest"]: r for r in rows}.values()
        ]
