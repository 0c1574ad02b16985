"""Calls: ingest (start, end, complete, batches), reads built as JSON in SQL, streamed queries,
stats, soft deletes with descendants, display-name updates."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from ...types.traces import (
    CallBatchStart,
    CallCreateBatchReq,
    CallsFilter,
    CallsQueryReq,
    CompletedCall,
    EndedCall,
    StartedCall,
)
from ..errors import BadRequest, NotFound, PayloadTooLarge
from .common import dumps, iso, now_us, to_us, uuid7
from .query import Expr, Fields, json_path, order_by, translate
from .refs import PREFIX, find_refs, op_display_name
from .store import Base

MAX_OP_NAME = 128
MAX_DISPLAY_NAME = 1024
MAX_DELETE = 1000

COLUMNS = (
    "pid, id, trace_id, parent_id, thread_id, turn_id, op_name, trace_name, display_name, started_at,"
    " ended_at, status, latency_ms, head, tail, summary, exception, input_refs, output_refs, wb_user_id,"
    " wb_run_id, wb_run_step, wb_run_step_end"
)
_PLACEHOLDERS = ", ".join("?" * 23)
_START_UPDATE = (
    "trace_id = excluded.trace_id, parent_id = excluded.parent_id, thread_id = excluded.thread_id,"
    " turn_id = excluded.turn_id, op_name = excluded.op_name, trace_name = excluded.trace_name,"
    " display_name = excluded.display_name, started_at = excluded.started_at, head = excluded.head,"
    " input_refs = excluded.input_refs, wb_user_id = excluded.wb_user_id, wb_run_id = excluded.wb_run_id,"
    " wb_run_step = excluded.wb_run_step"
)
_END_UPDATE = (
    "ended_at = excluded.ended_at, status = excluded.status, latency_ms = excluded.latency_ms,"
    " tail = excluded.tail, summary = excluded.summary, exception = excluded.exception,"
    " output_refs = excluded.output_refs, wb_run_step_end = excluded.wb_run_step_end"
)
INSERT_START = (
    f"INSERT INTO calls ({COLUMNS}) VALUES ({_PLACEHOLDERS})"
    f" ON CONFLICT (pid, id) DO UPDATE SET {_START_UPDATE}"
)
INSERT_FULL = (
    f"INSERT INTO calls ({COLUMNS}) VALUES ({_PLACEHOLDERS})"
    f" ON CONFLICT (pid, id) DO UPDATE SET {_START_UPDATE}, {_END_UPDATE}"
)
UPDATE_END = (
    "UPDATE calls SET ended_at = ?, status = ?, latency_ms = (? - started_at) / 1000, tail = ?, summary = ?,"
    " exception = ?, output_refs = ?, wb_run_step_end = ? WHERE pid = ? AND id = ?"
)

# A call is returned as JSON text assembled in SQL from stored JSON fragments (``head``: what a start
# fixes; ``tail``: what an end adds; ``summary`` without ``weave``), so a read parses no JSON.
# ``summary.weave`` is derived here from ``status`` and ``latency_ms``, stored when the call ends.
WEAVE_SQL = (
    '\'"weave":{"status":"\' || c.status || \'"\''
    " || CASE WHEN c.latency_ms IS NULL THEN '' ELSE ',\"latency_ms\":' || c.latency_ms END"
    " || CASE WHEN coalesce(c.display_name, '') = '' THEN ',\"trace_name\":' || json_quote(c.trace_name)"
    " ELSE ',\"display_name\":' || json_quote(c.display_name) END || '}}'"
)
SUMMARY_SQL = (
    "(CASE WHEN c.summary IS NULL OR c.summary = '{}' THEN '{'"
    f" ELSE substr(c.summary, 1, length(c.summary) - 1) || ',' END || {WEAVE_SQL})"
)
HEAD_KEYS = (
    "id",
    "op_name",
    "trace_id",
    "parent_id",
    "thread_id",
    "turn_id",
    "started_at",
    "attributes",
    "inputs",
    "wb_user_id",
    "wb_run_id",
    "wb_run_step",
)
TAIL_KEYS = ("ended_at", "exception", "output", "wb_run_step_end")
NULL_KEYS = ("deleted_at", "storage_size_bytes", "total_storage_size_bytes")
HEAD_SQL = "substr(c.head, 2, length(c.head) - 2)"
TAIL_SQL = (
    "coalesce(substr(c.tail, 2, length(c.tail) - 2), '" + ",".join(f'"{k}":null' for k in TAIL_KEYS) + "')"
)
# SQL giving the JSON text of each key of a returned call (``?`` is the project id as a JSON string).
CALL_KEYS: dict[str, str] = {
    **{k: f"(c.head -> '$.{k}')" for k in HEAD_KEYS},
    "project_id": "?",
    "display_name": "json_quote(nullif(c.display_name, ''))",
    **{k: f"coalesce(c.tail -> '$.{k}', 'null')" for k in TAIL_KEYS},
    "summary": SUMMARY_SQL,
    **{k: "'null'" for k in NULL_KEYS},
}
ALWAYS = ("id", "trace_id", "project_id", "op_name", "started_at")
WITH_SUMMARY = ("ended_at", "exception", "display_name")


def _line_sql(keys: Sequence[str]) -> str:
    """SQL of one call's JSON text with these keys; a full call splices the stored fragments whole."""
    if len(keys) == len(CALL_KEYS):
        nulls = ",".join(f'"{k}":null' for k in NULL_KEYS)
        return (
            f"'{{' || {HEAD_SQL} || ',\"project_id\":' || ? || ',\"display_name\":'"
            f" || {CALL_KEYS['display_name']} || ',' || {TAIL_SQL}"
            f" || ',\"summary\":' || {SUMMARY_SQL} || ',{nulls}}}'"
        )
    return "'{' || " + " || ',' || ".join(f"'\"{k}\":' || {CALL_KEYS[k]}" for k in keys) + " || '}'"


def _feedback_field(path: str) -> Expr | None:
    """``feedback.[<type>|*].<field or payload.path>``: the newest matching feedback on the call."""
    if not path.startswith("feedback.["):
        return None
    kind, sep, rest = path[len("feedback.[") :].partition("].")
    if not sep or not rest:
        raise BadRequest(f"Invalid feedback field: {path}")
    head, _, sub = rest.partition(".")
    if head == "payload":
        value, params = (
            ("json_extract(f.payload, ?)", (json_path(sub.split(".")),)) if sub else ("f.payload", ())
        )
    elif head in ("id", "feedback_type", "creator", "wb_user_id", "weave_ref"):
        value, params = f"f.{head}", ()
    else:
        raise BadRequest(f"Invalid feedback field: {path}")
    where = "" if kind == "*" else " AND f.feedback_type = ?"
    return Expr(
        f"(SELECT {value} FROM feedback f WHERE f.pid = c.pid AND f.call_id = c.id{where}"
        " ORDER BY f.created_at DESC LIMIT 1)",
        params + (() if kind == "*" else (kind,)),
    )


def _summary_field(path: str) -> Expr | None:
    special = {
        "summary.weave.status": "c.status",
        "summary.weave.latency_ms": "c.latency_ms",
        "summary.weave.trace_name": "c.trace_name",
        "summary.weave.display_name": "nullif(c.display_name, '')",
    }
    if path in special:
        return Expr(special[path])
    return _feedback_field(path)


CALL_FIELDS = Fields(
    columns={
        name: f"c.{name}"
        for name in (
            "id",
            "trace_id",
            "parent_id",
            "thread_id",
            "turn_id",
            "op_name",
            "display_name",
            "exception",
            "status",
            "wb_user_id",
            "wb_run_id",
            "wb_run_step",
            "wb_run_step_end",
        )
    },
    times={"started_at": "c.started_at", "ended_at": "c.ended_at", "deleted_at": "c.deleted_at"},
    json={
        "inputs": ("c.head", "$.inputs"),
        "attributes": ("c.head", "$.attributes"),
        "output": ("c.tail", "$.output"),
        "summary": ("c.summary", "$"),
    },
    extra=_summary_field,
)


def _refs(value: Any, text: str) -> str | None:
    if PREFIX not in text:
        return None
    refs = list(dict.fromkeys(find_refs(value)))
    return dumps(refs) if refs else None


def _check_names(op_name: str, display_name: str | None) -> None:
    if len(op_name) > MAX_OP_NAME and not op_name.startswith(PREFIX):
        raise BadRequest(f"op_name must be at most {MAX_OP_NAME} characters")
    if not op_name:
        raise BadRequest("op_name must not be empty")
    if display_name is not None and len(display_name) > MAX_DISPLAY_NAME:
        raise BadRequest(f"display_name must be at most {MAX_DISPLAY_NAME} characters")


def _start_row(pid: int, s: StartedCall | CompletedCall, user_id: str) -> list[Any]:
    """The row of a started call, in ``COLUMNS`` order."""
    _check_names(s.op_name, s.display_name)
    started = to_us(s.started_at)
    attributes = s.attributes if s.otel_dump is None else {**s.attributes, "otel_span": s.otel_dump}
    call_id, trace_id = s.id or uuid7(), s.trace_id or uuid7()
    head = dumps(
        {
            "id": call_id,
            "op_name": s.op_name,
            "trace_id": trace_id,
            "parent_id": s.parent_id,
            "thread_id": s.thread_id,
            "turn_id": s.turn_id,
            "started_at": iso(started),
            "attributes": attributes,
            "inputs": s.inputs,
            "wb_user_id": user_id,
            "wb_run_id": s.wb_run_id,
            "wb_run_step": s.wb_run_step,
        }
    )
    return [
        pid,
        call_id,
        trace_id,
        s.parent_id,
        s.thread_id,
        s.turn_id,
        s.op_name,
        op_display_name(s.op_name),
        s.display_name,
        started,
        None,
        "running",
        None,
        head,
        None,
        None,
        None,
        _refs(s.inputs, head),
        None,
        user_id,
        s.wb_run_id,
        s.wb_run_step,
        None,
    ]


def status_of(exception: str | None, summary: dict[str, Any]) -> str:
    """``summary.weave.status`` of an ended call."""
    if exception:
        return "error"
    counts = summary.get("status_counts")
    if isinstance(counts, dict) and isinstance(counts.get("error"), int | float) and counts["error"] > 0:
        return "descendant_error"
    return "success"


def _end_values(e: EndedCall | CompletedCall) -> tuple[Any, ...]:
    """ended_at, status, ended_at again (for the latency), tail, summary, exception, output_refs,
    wb_run_step_end: the ``UPDATE_END`` parameters before the key."""
    ended = to_us(e.ended_at)
    tail = dumps(
        {
            "ended_at": iso(ended),
            "exception": e.exception,
            "output": e.output,
            "wb_run_step_end": e.wb_run_step_end,
        }
    )
    summary = {k: v for k, v in e.summary.items() if k != "weave"}
    return (
        ended,
        status_of(e.exception, summary),
        ended,
        tail,
        dumps(summary),
        e.exception,
        _refs(e.output, tail),
        e.wb_run_step_end,
    )


def _merge_end(row: list[Any], end: tuple[Any, ...]) -> None:
    ended, status, _, tail, summary, exception, output_refs, step_end = end
    row[10], row[11], row[12] = ended, status, (ended - row[9]) // 1000
    row[14], row[15], row[16], row[18], row[22] = tail, summary, exception, output_refs, step_end


class Calls:
    def __init__(self, base: Base) -> None:
        self.base = base

    # ------------------------------------------------------------------ writes

    def upsert_batch(self, user_id: str, req: CallCreateBatchReq) -> list[dict[str, str]]:
        """Starts and ends in order, in one transaction; an end whose start is in the same batch is
        folded into its row, so each call is written once."""
        results: list[dict[str, str]] = []
        rows: dict[tuple[int, str], list[Any]] = {}
        ends: list[tuple[Any, ...]] = []
        with self.base.db.write() as conn:
            for item in req.batch:
                if isinstance(item, CallBatchStart):
                    start = item.req.start
                    pid = self._pid(user_id, start.project_id)
                    row = _start_row(pid, start, user_id)
                    rows[(pid, row[1])] = row
                    results.append({"id": row[1], "trace_id": row[2]})
                else:
                    end = item.req.end
                    pid = self._pid(user_id, end.project_id)
                    values = _end_values(end)
                    pending = rows.get((pid, end.id))
                    if pending is not None:
                        _merge_end(pending, values)
                    else:
                        ends.append((*values, pid, end.id))
                    results.append({})
            full = [r for r in rows.values() if r[10] is not None]
            starts = [r for r in rows.values() if r[10] is None]
            if full:
                conn.executemany(INSERT_FULL, full)
            if starts:
                conn.executemany(INSERT_START, starts)
            if ends:
                conn.executemany(UPDATE_END, ends)
        return results

    def start(self, user_id: str, start: StartedCall) -> dict[str, str]:
        with self.base.db.write() as conn:
            row = _start_row(self._pid(user_id, start.project_id), start, user_id)
            conn.execute(INSERT_START, row)
        return {"id": row[1], "trace_id": row[2]}

    def end(self, user_id: str, end: EndedCall) -> None:
        with self.base.db.write() as conn:
            conn.execute(UPDATE_END, (*_end_values(end), self._pid(user_id, end.project_id), end.id))

    def complete(self, user_id: str, calls: Sequence[CompletedCall]) -> None:
        """Whole calls (``/v2/.../calls/complete``, OTel export, tracked completions)."""
        with self.base.db.write() as conn:
            batch = []
            for call in calls:
                row = _start_row(self._pid(user_id, call.project_id), call, user_id)
                _merge_end(row, _end_values(call))
                batch.append(row)
            conn.executemany(INSERT_FULL, batch)

    def update(self, user_id: str, project_id: str, call_id: str, display_name: str | None) -> None:
        if display_name is None:
            raise BadRequest("One of [display_name] is required for call update")
        _check_names("x", display_name)
        pid = self.base.pid(user_id, project_id)
        with self.base.db.write() as conn:
            cur = conn.execute(
                "UPDATE calls SET display_name = ? WHERE pid = ? AND id = ? AND deleted_at IS NULL",
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

    def stream(self, user_id: str, req: CallsQueryReq) -> Iterator[list[str]]:
        """Chunks of calls as JSON text, one per call, read with a connection of its own."""
        pid = self.base.pid(user_id, req.project_id)
        if pid is None:
            return iter(())
        sql, params = _select(pid, req)
        return self.base.rows(sql, params)

    def read(self, user_id: str, project_id: str, call_id: str) -> str | None:
        """One call as JSON text, or ``None``."""
        pid = self.base.pid(user_id, project_id)
        if pid is None:
            return None
        req = CallsQueryReq(project_id=project_id, filter=CallsFilter(call_ids=[call_id]), limit=1)
        sql, params = _select(pid, req)
        row = self.base.db.conn.execute(sql, params).fetchone()
        return None if row is None else str(row[0])

    def count(self, user_id: str, req: CallsQueryReq, limit: int | None) -> tuple[int, bool]:
        """How many calls match (at most ``limit``) and whether more than ``limit`` do."""
        pid = self.base.pid(user_id, req.project_id)
        if pid is None:
            return 0, False
        where, params = _where(pid, req)
        if limit is None:
            row = self.base.db.conn.execute(f"SELECT count(*) FROM calls c WHERE {where}", params).fetchone()
            return int(row[0]), False
        row = self.base.db.conn.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM calls c WHERE {where} LIMIT ?)", (*params, limit + 1)
        ).fetchone()
        return min(int(row[0]), limit), int(row[0]) > limit


def _in(column: str, values: Sequence[str]) -> tuple[str, tuple[Any, ...]]:
    return f"{column} IN ({', '.join('?' * len(values))})", tuple(values)


def _op_names(names: Sequence[str]) -> tuple[str, tuple[Any, ...]]:
    exact = [n for n in names if not n.endswith(":*")]
    parts: list[str] = []
    params: list[Any] = []
    if exact:
        sql, p = _in("c.op_name", exact)
        parts.append(sql)
        params.extend(p)
    for name in names:
        if name.endswith(":*"):
            prefix = name[:-1]
            parts.append("(c.op_name >= ? AND c.op_name < ?)")
            params.extend((prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)))
    return "(" + " OR ".join(parts) + ")", tuple(params)


def _ref_filter(column: str, refs: Sequence[str]) -> tuple[str, tuple[Any, ...]]:
    conds: list[str] = []
    params: list[Any] = []
    for ref in refs:
        if ref.endswith(":*"):
            conds.append("substr(j.value, 1, ?) = ?")
            params.extend((len(ref) - 1, ref[:-1]))
        else:
            conds.append("j.value = ?")
            params.append(ref)
    return f"EXISTS (SELECT 1 FROM json_each({column}) j WHERE {' OR '.join(conds)})", tuple(params)


FILTER_COLUMNS = {
    "parent_ids": "c.parent_id",
    "trace_ids": "c.trace_id",
    "call_ids": "c.id",
    "thread_ids": "c.thread_id",
    "turn_ids": "c.turn_id",
    "wb_user_ids": "c.wb_user_id",
    "wb_run_ids": "c.wb_run_id",
}


def _where(pid: int, req: CallsQueryReq) -> tuple[str, tuple[Any, ...]]:
    parts = ["c.pid = ?", "c.deleted_at IS NULL"]
    params: list[Any] = [pid]
    f = req.filter
    if f is not None:
        if f.op_names:
            sql, p = _op_names(f.op_names)
            parts.append(sql)
            params.extend(p)
        for name, column in FILTER_COLUMNS.items():
            values = getattr(f, name)
            if values is not None:
                if not values:
                    parts.append("0")
                    continue
                sql, p = _in(column, values)
                parts.append(sql)
                params.extend(p)
        if f.input_refs:
            sql, p = _ref_filter("c.input_refs", f.input_refs)
            parts.append(sql)
            params.extend(p)
        if f.output_refs:
            sql, p = _ref_filter("c.output_refs", f.output_refs)
            parts.append(sql)
            params.extend(p)
        if f.trace_roots_only:
            parts.append("c.parent_id IS NULL")
    if req.query is not None:
        expr = translate(req.query.expr, CALL_FIELDS)
        parts.append(expr.sql)
        params.extend(expr.params)
    return " AND ".join(parts), tuple(params)


def selected_keys(columns: Sequence[str] | None, include_costs: bool) -> list[str]:
    if not columns:
        return list(CALL_KEYS)
    wanted = {c.split(".", 1)[0] for c in columns} | set(ALWAYS)
    if "summary" in wanted or include_costs:
        wanted |= {"summary", *WITH_SUMMARY}
    return [k for k in CALL_KEYS if k in wanted]


def _select(pid: int, req: CallsQueryReq) -> tuple[str, tuple[Any, ...]]:
    keys = selected_keys(req.columns, req.include_costs)
    where, where_params = _where(pid, req)
    if req.sort_by is None:
        order, order_params = " ORDER BY c.started_at ASC, c.id ASC", ()
    elif not req.sort_by:
        order, order_params = "", ()
    else:
        sort = [(s.field, s.direction) for s in req.sort_by]
        last = sort[-1]
        tie = f"c.id {last[1].upper() if last[0] == 'started_at' else 'DESC'}"
        order, order_params = order_by(sort, CALL_FIELDS, tie)
    limit = ""
    limit_params: tuple[Any, ...] = ()
    if req.limit is not None or req.offset:
        if req.limit is not None and req.limit < 0:
            raise BadRequest("limit must be non-negative")
        limit = " LIMIT ? OFFSET ?"
        limit_params = (req.limit if req.limit is not None else -1, req.offset or 0)
    project_params = (dumps(req.project_id),) if "project_id" in keys else ()
    sql = f"SELECT {_line_sql(keys)} FROM calls c WHERE {where}{order}{limit}"
    return sql, (*project_params, *where_params, *order_params, *limit_params)
