"""The ``$expr`` query language translated to SQLite SQL with bound parameters.

A :class:`Fields` maps ``$getField`` paths of one resource (calls, feedback, costs) to SQL
expressions; :func:`translate` walks the expression tree and returns ``(sql, params)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ...types.common import utc_representable
from ..errors import BadRequest
from .common import dumps, to_us

COMPARISONS = {"$eq": "=", "$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
CONVERSIONS = {"double": "REAL", "int": "INTEGER", "string": "TEXT"}
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MIN_US, MAX_US = to_us(datetime.min), to_us(datetime.max)


@dataclass(frozen=True)
class Expr:
    """A SQL fragment; ``time`` marks microsecond columns (literals compared to them are converted)."""

    sql: str
    params: tuple[Any, ...] = ()
    time: bool = False


Resolver = Callable[[str], Expr]


def json_path(parts: list[str]) -> str:
    """A SQLite JSON path for dotted keys; all-digit parts index arrays."""
    out = "$"
    for part in parts:
        if part.isdigit():
            out += f"[{part}]"
        else:
            out += '."' + part.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return out


@dataclass
class Fields:
    """The fields of one resource: plain columns, microsecond time columns, JSON values (the JSON
    column holding each and its path there, ``"$"`` for a whole column), and special paths
    (``extra``) resolved by a function of the dotted path."""

    columns: Mapping[str, str]
    times: Mapping[str, str] = field(default_factory=dict)
    json: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    extra: Callable[[str], Expr | None] | None = None

    def __call__(self, path: str) -> Expr:
        if self.extra is not None and (special := self.extra(path)) is not None:
            return special
        if path in self.columns:
            return Expr(self.columns[path])
        if path in self.times:
            return Expr(self.times[path], time=True)
        head, _, rest = path.partition(".")
        if head in self.json:
            column, base = self.json[head]
            path = json_path(rest.split(".")) if rest else "$"
            return Expr(f"json_extract({column}, ?)", (base + path[1:],))
        raise BadRequest(f"Unknown field: {path}")


def _literal(value: Any, time: bool) -> Expr:
    if isinstance(value, dict | list):
        return Expr("?", (dumps(value),))
    if time and isinstance(value, str | int | float) and not isinstance(value, bool):
        return Expr("?", (_time_literal(value),))
    if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
        return Expr("?", (float(value),))  # SQLite's integers are 64-bit; it compares as a real
    return Expr("?", (value,))


def _time_literal(value: str | float) -> int:
    """Microseconds since the epoch of a time literal (ISO text, or seconds since the epoch); a
    400 for one that is no time of datetime's range in UTC."""
    try:
        if isinstance(value, str):
            return to_us(utc_representable(datetime.fromisoformat(value.replace("Z", "+00:00"))))
        us = value * 1_000_000
        if not MIN_US <= us <= MAX_US:  # also false for NaN
            raise ValueError(value)
        return int(us)
    except ValueError as exc:
        raise BadRequest(f"Invalid datetime literal: {value}") from exc


def _only(spec: Any, name: str) -> Any:
    if not isinstance(spec, dict) or len(spec) != 1:
        raise BadRequest(f"Invalid {name}: expected an object with exactly one operator")
    return next(iter(spec.items()))


class _Translator:
    def __init__(self, resolve: Resolver) -> None:
        self.resolve = resolve

    def operand(self, spec: Any, time_hint: bool = False) -> Expr:
        key, arg = _only(spec, "operand")
        if key == "$literal":
            return _literal(arg, time_hint)
        if key == "$getField":
            if not isinstance(arg, str) or not arg:
                raise BadRequest("$getField takes a field name")
            return self.resolve(arg)
        if key == "$convert":
            if not isinstance(arg, dict) or "input" not in arg or "to" not in arg:
                raise BadRequest("$convert takes {input, to}")
            inner = self.operand(arg["input"])
            to = arg["to"]
            if to in CONVERSIONS:
                return Expr(f"CAST({inner.sql} AS {CONVERSIONS[to]})", inner.params)
            if to == "bool":
                return Expr(f"(CAST({inner.sql} AS INTEGER) != 0)", inner.params)
            if to == "exists":
                return Expr(f"({inner.sql} IS NOT NULL)", inner.params)
            raise BadRequest(f"Unknown $convert target: {to}")
        if key == "$size":
            inner = self.operand(arg)
            return Expr(f"json_array_length({inner.sql})", inner.params)
        return self.operation({key: arg})

    def operation(self, spec: Any) -> Expr:
        key, arg = _only(spec, "operation")
        if key in ("$and", "$or"):
            if not isinstance(arg, list) or not arg:
                raise BadRequest(f"{key} takes a non-empty list")
            parts = [self.operation(item) for item in arg]
            joiner = " AND " if key == "$and" else " OR "
            return Expr(
                "(" + joiner.join(p.sql for p in parts) + ")", tuple(x for p in parts for x in p.params)
            )
        if key == "$not":
            if not isinstance(arg, list) or len(arg) != 1:
                raise BadRequest("$not takes a list of one operation")
            inner = self.operation(arg[0])
            return Expr(f"(NOT {inner.sql})", inner.params)
        if key in COMPARISONS:
            if not isinstance(arg, list) or len(arg) != 2:
                raise BadRequest(f"{key} takes two operands")
            left = self.operand(arg[0])
            if key == "$eq" and arg[1] == {"$literal": None}:
                return Expr(f"({left.sql} IS NULL)", left.params)
            right = self.operand(arg[1], left.time)
            if left.sql == "?" and right.time:
                left = self.operand(arg[0], True)
            return Expr(f"({left.sql} {COMPARISONS[key]} {right.sql})", left.params + right.params)
        if key == "$in":
            if not isinstance(arg, list) or len(arg) != 2 or not isinstance(arg[1], list):
                raise BadRequest("$in takes [operand, [operands]]")
            left = self.operand(arg[0])
            if not arg[1]:
                return Expr("(0)", left.params)
            items = [self.operand(item, left.time) for item in arg[1]]
            return Expr(
                f"({left.sql} IN ({', '.join(i.sql for i in items)}))",
                left.params + tuple(x for i in items for x in i.params),
            )
        if key == "$contains":
            if not isinstance(arg, dict) or "input" not in arg or not isinstance(arg.get("substr"), str):
                raise BadRequest("$contains takes {input, substr, case_insensitive?}")
            inner = self.operand(arg["input"])
            if arg.get("case_insensitive"):
                return Expr(
                    f"(instr(lower(CAST({inner.sql} AS TEXT)), lower(?)) > 0)", (*inner.params, arg["substr"])
                )
            return Expr(f"(instr(CAST({inner.sql} AS TEXT), ?) > 0)", (*inner.params, arg["substr"]))
        raise BadRequest(f"Unknown operator: {key}")


def translate(expr: Any, resolve: Resolver) -> Expr:
    """SQL for a ``$expr`` operation (the value under the ``$expr`` key)."""
    return _Translator(resolve).operation(expr)


def order_by(
    sort: Sequence[tuple[str, str]], resolve: Resolver, tiebreak: str | None = None
) -> tuple[str, tuple[Any, ...]]:
    """``ORDER BY`` text for ``(field, direction)`` pairs; the tiebreak column goes last."""
    parts: list[str] = []
    params: list[Any] = []
    for name, direction in sort:
        if direction.lower() not in ("asc", "desc"):
            raise BadRequest(f"Invalid sort direction: {direction}")
        expr = resolve(name)
        parts.append(f"{expr.sql} {direction.upper()}")
        params.extend(expr.params)
    if tiebreak:
        parts.append(tiebreak)
    return (" ORDER BY " + ", ".join(parts) if parts else ""), tuple(params)


def ids_of_purge_query(expr: Any, *, allow_in: bool, message: str) -> list[str]:
    """The ids of a purge query: ``$eq`` on ``id``, an ``$or`` of those, or (costs) ``$in`` on ``id``."""

    def eq(spec: Any) -> str | None:
        if isinstance(spec, dict) and list(spec) == ["$eq"] and isinstance(spec["$eq"], list):
            left, right = ([*spec["$eq"], None, None])[:2]
            if (
                len(spec["$eq"]) == 2
                and left == {"$getField": "id"}
                and isinstance(right, dict)
                and isinstance(right.get("$literal"), str)
            ):
                return str(right["$literal"])
        return None

    if (one := eq(expr)) is not None:
        return [one]
    if isinstance(expr, dict) and list(expr) == ["$or"] and isinstance(expr["$or"], list) and expr["$or"]:
        ids = [eq(item) for item in expr["$or"]]
        if all(i is not None for i in ids):
            return [i for i in ids if i is not None]
    if allow_in and isinstance(expr, dict) and list(expr) == ["$in"] and isinstance(expr["$in"], list):
        spec = expr["$in"]
        if len(spec) == 2 and spec[0] == {"$getField": "id"} and isinstance(spec[1], list) and spec[1]:
            values = [item.get("$literal") if isinstance(item, dict) else None for item in spec[1]]
            if all(isinstance(v, str) for v in values):
                return [str(v) for v in values]
    raise BadRequest(message)
