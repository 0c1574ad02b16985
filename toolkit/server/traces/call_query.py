"""How calls are read: the SQL that assembles each call's JSON from its stored fragments, the
fields the query language may name, and the ``WHERE`` / ``ORDER BY`` / ``LIMIT`` of a query."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...types.traces import CallsQueryReq
from ..errors import BadRequest
from .common import dumps
from .query import Expr, Fields, json_path, order_by, translate

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
    """SQL of one call's JSON text with these keys; a full call is its stored line, or else the stored
    fragments spliced whole."""
    if len(keys) == len(CALL_KEYS):
        nulls = ",".join(f'"{k}":null' for k in NULL_KEYS)
        return (
            f"coalesce(c.line, '{{' || {HEAD_SQL} || ',\"project_id\":' || ? || ',\"display_name\":'"
            f" || {CALL_KEYS['display_name']} || ',' || {TAIL_SQL}"
            f" || ',\"summary\":' || {SUMMARY_SQL} || ',{nulls}}}')"
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


def where_sql(pid: int, req: CallsQueryReq) -> tuple[str, tuple[Any, ...]]:
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


def select_sql(pid: int, req: CallsQueryReq) -> tuple[str, tuple[Any, ...]]:
    keys = selected_keys(req.columns, req.include_costs)
    where, where_params = where_sql(pid, req)
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
    # as a BLOB: the line reaches Python as the bytes to send (no decoding and re-encoding)
    sql = f"SELECT CAST({_line_sql(keys)} AS BLOB) FROM calls c WHERE {where}{order}{limit}"
    return sql, (*project_params, *where_params, *order_params, *limit_params)
