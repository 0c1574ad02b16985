"""How a call is written: its row (stored JSON fragments ``head`` and ``tail``, derived columns),
the SQL that inserts or ends it, and the checks on its names."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ...types.traces import CompletedCall, EndedCall, StartedCall
from ..errors import BadRequest
from .common import dumps, iso, to_us, uuid7
from .refs import PREFIX, find_refs, op_display_name

MAX_OP_NAME = 128
MAX_DISPLAY_NAME = 1024

COLUMNS = (
    "pid, id, trace_id, parent_id, thread_id, turn_id, op_name, trace_name, display_name, started_at,"
    " ended_at, status, latency_ms, head, tail, summary, exception, input_refs, output_refs, wb_user_id,"
    " wb_run_id, wb_run_step, wb_run_step_end, line"
)
_PLACEHOLDERS = ", ".join("?" * 24)
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
# ``line``: the finished call's JSON as reads return it, stored when a call is written whole (its end
# in the same batch as its start) and cleared by any later change (reads then assemble it in SQL)
INSERT_START = (
    f"INSERT INTO calls ({COLUMNS}) VALUES ({_PLACEHOLDERS})"
    f" ON CONFLICT (pid, id) DO UPDATE SET {_START_UPDATE}, line = NULL"
)
INSERT_FULL = (
    f"INSERT INTO calls ({COLUMNS}) VALUES ({_PLACEHOLDERS})"
    f" ON CONFLICT (pid, id) DO UPDATE SET {_START_UPDATE}, {_END_UPDATE}, line = excluded.line"
)
UPDATE_END = (
    "UPDATE calls SET ended_at = ?, status = ?, latency_ms = (? - started_at) / 1000, tail = ?, summary = ?,"
    " exception = ?, output_refs = ?, wb_run_step_end = ?, line = NULL WHERE pid = ? AND id = ?"
)
_NULLS = ',"deleted_at":null,"storage_size_bytes":null,"total_storage_size_bytes":null}'


def _refs(value: Any, text: str) -> str | None:
    if PREFIX not in text:
        return None
    refs = list(dict.fromkeys(find_refs(value)))
    return dumps(refs) if refs else None


def check_names(op_name: str, display_name: str | None) -> None:
    if len(op_name) > MAX_OP_NAME and not op_name.startswith(PREFIX):
        raise BadRequest(f"op_name must be at most {MAX_OP_NAME} characters")
    if not op_name:
        raise BadRequest("op_name must not be empty")
    if display_name is not None and len(display_name) > MAX_DISPLAY_NAME:
        raise BadRequest(f"display_name must be at most {MAX_DISPLAY_NAME} characters")


def _time(dt: datetime) -> tuple[int, datetime | str]:
    """Microseconds since the epoch, and what :func:`dumps` writes as the wire text of the time
    (``2025-06-01T12:00:00.123456Z``): the time itself when orjson writes that text, else the text."""
    us = to_us(dt)
    if dt.microsecond and (dt.tzinfo is None or not dt.utcoffset()):
        return us, dt
    return us, str(iso(us))


def start_row(pid: int, s: StartedCall | CompletedCall, user_id: str) -> list[Any]:
    """The row of a started call, in ``COLUMNS`` order."""
    op_name = s.op_name
    check_names(op_name, s.display_name)
    started, started_text = _time(s.started_at)
    attributes = s.attributes if s.otel_dump is None else {**s.attributes, "otel_span": s.otel_dump}
    call_id, trace_id = s.id or uuid7(), s.trace_id or uuid7()
    head = dumps(
        {
            "id": call_id,
            "op_name": op_name,
            "trace_id": trace_id,
            "parent_id": s.parent_id,
            "thread_id": s.thread_id,
            "turn_id": s.turn_id,
            "started_at": started_text,
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
        op_name,
        op_display_name(op_name),
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


def end_values(e: EndedCall | CompletedCall) -> tuple[Any, ...]:
    """ended_at, status, ended_at again (for the latency), tail, summary, exception, output_refs,
    wb_run_step_end: the ``UPDATE_END`` parameters before the key."""
    ended, ended_text = _time(e.ended_at)
    exception = e.exception
    tail = dumps(
        {
            "ended_at": ended_text,
            "exception": exception,
            "output": e.output,
            "wb_run_step_end": e.wb_run_step_end,
        }
    )
    summary = e.summary
    if "weave" in summary:
        summary = {k: v for k, v in summary.items() if k != "weave"}
    return (
        ended,
        status_of(exception, summary),
        ended,
        tail,
        dumps(summary),
        exception,
        _refs(e.output, tail),
        e.wb_run_step_end,
    )


def merge_end(row: list[Any], end: tuple[Any, ...], project_id: str) -> None:
    """Fold an end into the row of its start, with the finished line."""
    ended, status, _, tail, summary, exception, output_refs, step_end = end
    row[10], row[11], row[12] = ended, status, (ended - row[9]) // 1000
    row[14], row[15], row[16], row[18], row[22] = tail, summary, exception, output_refs, step_end
    row[23] = finished_line(row, project_id)


def finished_line(row: list[Any], project_id: str) -> str:
    """The JSON a read returns for this ended call (what ``call_query`` assembles from the fragments)."""
    display_name, head, tail, summary = row[8], row[13], row[14], row[15]
    named = f',"display_name":{dumps(display_name)}' if display_name else f',"trace_name":{dumps(row[7])}'
    weave = f'"weave":{{"status":"{row[11]}","latency_ms":{row[12]}{named}}}}}'
    return "".join(
        (
            "{",
            head[1:-1],
            ',"project_id":',
            dumps(project_id),
            ',"display_name":',
            dumps(display_name) if display_name else "null",
            ",",
            tail[1:-1],
            ',"summary":',
            "{" if summary == "{}" else summary[:-1] + ",",
            weave,
            _NULLS,
        )
    )
