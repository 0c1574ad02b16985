"""Feedback on calls and objects: validated by type, queried with the ``$expr`` language."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from typing import Any

from ...types.traces import FeedbackCreateReq
from ..errors import BadRequest
from .common import dumps, iso, iso_sql, loads, now_us, uuid7
from .query import Expr, Fields, ids_of_purge_query, json_path, order_by, translate
from .refs import PREFIX
from .store import Base

MAX_PAYLOAD = 1 << 20
MAX_NOTE = 1024
COLUMNS = (
    "id",
    "project_id",
    "weave_ref",
    "wb_user_id",
    "creator",
    "created_at",
    "feedback_type",
    "payload",
    "annotation_ref",
    "runnable_ref",
    "call_ref",
    "trigger_ref",
    "queue_id",
)
SKIN_TONES = range(0x1F3FB, 0x1F400)
EMOJI_JOINERS = {0x200D, 0xFE0F, 0xFE0E, 0x20E3}


def _column_sql(name: str) -> str:
    if name == "project_id":
        return "?"
    if name == "created_at":
        return iso_sql("f.created_at")
    if name == "payload":
        return "json(f.payload)"
    return f"f.{name}"


def _payload_field(path: str) -> Expr | None:
    if path.startswith("payload."):
        return Expr("json_extract(f.payload, ?)", (json_path(path.split(".")[1:]),))
    return None


FEEDBACK_FIELDS = Fields(
    columns={n: f"f.{n}" for n in COLUMNS if n not in ("project_id", "created_at", "payload")},
    times={"created_at": "f.created_at"},
    json={"payload": ("f.payload", "$")},
    extra=_payload_field,
)


def _is_emoji(text: str) -> bool:
    """One emoji (a single pictograph, optionally with skin tone, variation selectors, ZWJ parts)."""
    if not text or len(text) > 16:
        return False
    base = [ch for ch in text if ord(ch) not in EMOJI_JOINERS and ord(ch) not in SKIN_TONES]
    if not base or any(unicodedata.category(ch) not in ("So", "Sk") for ch in base):
        return False
    joined = sum(1 for ch in text if ord(ch) == 0x200D)
    return len(base) == joined + 1 or (all(0x1F1E6 <= ord(ch) <= 0x1F1FF for ch in base) and len(base) == 2)


def _alias(text: str) -> str:
    names = [
        unicodedata.name(ch, "").lower().replace(" ", "_") for ch in text if ord(ch) not in EMOJI_JOINERS
    ]
    return ":" + "_".join(n for n in names if n) + ":"


def validate(req: FeedbackCreateReq) -> dict[str, Any]:
    """The payload to store: checked per feedback type, reactions completed with their aliases."""
    kind, payload = req.feedback_type, dict(req.payload)
    if not kind:
        raise BadRequest("feedback_type must not be empty")
    if not req.weave_ref.startswith(PREFIX):
        raise BadRequest(f"Invalid weave_ref: {req.weave_ref}")
    if kind == "wandb.reaction.1":
        emoji = payload.get("emoji")
        if not isinstance(emoji, str) or not _is_emoji(emoji):
            raise BadRequest("Value error, Must be a single emoji")
        detoned = "".join(ch for ch in emoji if ord(ch) not in SKIN_TONES)
        payload = {
            "emoji": emoji,
            "alias": _alias(emoji),
            "detoned": detoned,
            "detoned_alias": _alias(detoned),
        }
    elif kind == "wandb.note.1":
        note = payload.get("note")
        if not isinstance(note, str) or not 1 <= len(note) <= MAX_NOTE:
            raise BadRequest(f"Note must be a string of 1 to {MAX_NOTE} characters")
    elif kind.startswith("wandb.annotation."):
        if not req.annotation_ref:
            raise BadRequest("annotation_ref is required for annotation feedback")
        if "value" not in payload:
            raise BadRequest("Annotation payload must contain 'value'")
    elif kind.startswith("wandb.runnable."):
        if not req.runnable_ref:
            raise BadRequest("runnable_ref is required for runnable feedback")
        if "output" not in payload:
            raise BadRequest("Runnable payload must contain 'output'")
    elif kind.startswith("wandb."):
        raise BadRequest(f"Unknown feedback type: {kind}")
    if not kind.startswith("wandb.runnable.") and (req.runnable_ref or req.call_ref or req.trigger_ref):
        raise BadRequest("runnable_ref, call_ref and trigger_ref are only allowed on runnable feedback")
    if not kind.startswith("wandb.annotation.") and req.annotation_ref:
        raise BadRequest("annotation_ref is only allowed on annotation feedback")
    if len(dumps(payload)) > MAX_PAYLOAD:
        raise BadRequest(f"Feedback payload too large (limit {MAX_PAYLOAD} bytes)")
    return payload


def _call_id(project_id: str, weave_ref: str) -> str | None:
    prefix = f"{PREFIX}{project_id}/call/"
    if weave_ref.startswith(prefix):
        rest = weave_ref[len(prefix) :]
        return rest.split("/", 1)[0] or None
    return None


class Feedback:
    def __init__(self, base: Base) -> None:
        self.base = base

    def create(self, user_id: str, reqs: Sequence[FeedbackCreateReq]) -> list[dict[str, Any]]:
        """Validate all, then insert all in one transaction (client-chosen ids kept)."""
        payloads = [validate(r) for r in reqs]
        out: list[dict[str, Any]] = []
        with self.base.db.write() as conn:
            for req, payload in zip(reqs, payloads, strict=True):
                pid = self.base.pid(user_id, req.project_id, create=True)
                feedback_id, created = req.id or uuid7(), now_us()
                conn.execute(
                    "INSERT OR REPLACE INTO feedback (pid, id, weave_ref, call_id, wb_user_id, creator,"
                    " created_at,"
                    " feedback_type, payload, annotation_ref, runnable_ref, call_ref, trigger_ref, queue_id)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        pid,
                        feedback_id,
                        req.weave_ref,
                        _call_id(req.project_id, req.weave_ref),
                        user_id,
                        req.creator,
                        created,
                        req.feedback_type,
                        dumps(payload),
                        req.annotation_ref,
                        req.runnable_ref,
                        req.call_ref,
                        req.trigger_ref,
                        req.queue_id,
                    ),
                )
                out.append(
                    {"id": feedback_id, "created_at": iso(created), "wb_user_id": user_id, "payload": payload}
                )
        return out

    def replace(self, user_id: str, feedback_id: str, req: FeedbackCreateReq) -> dict[str, Any]:
        with self.base.db.write():
            self.purge(user_id, req.project_id, [feedback_id])
            return self.create(user_id, [req])[0]

    def purge(self, user_id: str, project_id: str, ids: Sequence[str]) -> None:
        pid = self.base.pid(user_id, project_id)
        if pid is None or not ids:
            return
        with self.base.db.write() as conn:
            conn.execute(
                f"DELETE FROM feedback WHERE pid = ? AND id IN ({', '.join('?' * len(ids))})", (pid, *ids)
            )

    def purge_query(self, user_id: str, project_id: str, expr: Any) -> None:
        message = "Can only purge feedback by specifying one or more feedback ids"
        self.purge(user_id, project_id, ids_of_purge_query(expr, allow_in=False, message=message))

    def query(
        self,
        user_id: str,
        project_id: str,
        fields: Sequence[str] | None,
        expr: Any,
        sort: Sequence[tuple[str, str]],
        limit: int | None,
        offset: int | None,
    ) -> tuple[list[dict[str, Any]], int]:
        """Rows keyed by the requested field names (``payload.x`` paths included), and the total."""
        pid = self.base.pid(user_id, project_id)
        if pid is None:
            return [], 0
        where, params = "f.pid = ?", [pid]
        if expr is not None:
            cond = translate(expr, FEEDBACK_FIELDS)
            where += f" AND {cond.sql}"
            params.extend(cond.params)
        names = list(fields) if fields else list(COLUMNS)
        select: list[str] = []
        select_params: list[Any] = []
        for name in names:
            if name in COLUMNS:
                select.append(_column_sql(name))
                if name == "project_id":
                    select_params.append(project_id)
            else:
                e = FEEDBACK_FIELDS(name)
                select.append(e.sql)
                select_params.extend(e.params)
        order, order_params = order_by(list(sort), FEEDBACK_FIELDS, "f.created_at ASC, f.rowid ASC")
        conn = self.base.db.conn
        total = conn.execute(f"SELECT count(*) FROM feedback f WHERE {where}", params).fetchone()[0]
        rows = conn.execute(
            f"SELECT {', '.join(select)} FROM feedback f WHERE {where}{order} LIMIT ? OFFSET ?",
            (*select_params, *params, *order_params, limit if limit is not None else -1, offset or 0),
        )
        out = []
        for row in rows:
            item = dict(zip(names, row, strict=True))
            if "payload" in item and isinstance(item["payload"], str):
                item["payload"] = loads(item["payload"])
            out.append(item)
        return out, int(total)

    def for_calls(
        self, conn: Any, pid: int, project_id: str, call_ids: Sequence[str]
    ) -> dict[str, list[Any]]:
        """Feedback rows of each call (for ``include_feedback``)."""
        if not call_ids:
            return {}
        select = ", ".join(_column_sql(n) for n in COLUMNS)
        rows = conn.execute(
            f"SELECT f.call_id, {select} FROM feedback f WHERE f.pid = ? AND f.call_id IN"
            f" ({', '.join('?' * len(call_ids))}) ORDER BY f.created_at, f.rowid",
            (project_id, pid, *call_ids),
        )
        out: dict[str, list[Any]] = {}
        for row in rows:
            item = dict(zip(COLUMNS, row[1:], strict=True))
            item["payload"] = loads(item["payload"])
            out.setdefault(row[0], []).append(item)
        return out
