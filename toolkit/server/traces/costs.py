"""Token prices per model (project-level, plus default-level rows with ``pid`` NULL) and the costs
they give the calls' ``summary.usage``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...types.traces import CostCreateInput
from .common import iso, iso_sql, now_us, to_us, uuid7
from .query import Fields, ids_of_purge_query, order_by, translate
from .store import Base

PRICE_COLUMNS = (
    "id",
    "llm_id",
    "prompt_token_cost",
    "completion_token_cost",
    "cache_read_input_token_cost",
    "cache_creation_input_token_cost",
    "prompt_token_cost_unit",
    "completion_token_cost_unit",
    "effective_date",
    "provider_id",
)
COST_FIELDS = Fields(
    columns={
        n: n
        for n in (*PRICE_COLUMNS, "pricing_level", "pricing_level_id", "created_by")
        if n != "effective_date"
    },
    times={"effective_date": "effective_date", "created_at": "created_at"},
)


class Costs:
    def __init__(self, base: Base) -> None:
        self.base = base

    def create(
        self, user_id: str, project_id: str, costs: dict[str, CostCreateInput]
    ) -> list[tuple[str, str]]:
        pid = self.base.pid(user_id, project_id, create=True)
        ids: list[tuple[str, str]] = []
        now = now_us()
        with self.base.db.write() as conn:
            for llm_id, c in costs.items():
                cost_id = uuid7()
                conn.execute(
                    "INSERT INTO llm_token_prices (id, pid, pricing_level, pricing_level_id, provider_id,"
                    " llm_id,"
                    " effective_date, prompt_token_cost, completion_token_cost, cache_read_input_token_cost,"
                    " cache_creation_input_token_cost, prompt_token_cost_unit, completion_token_cost_unit,"
                    " created_by, created_at) VALUES (?, ?, 'project', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        cost_id,
                        pid,
                        project_id,
                        c.provider_id or "default",
                        llm_id,
                        to_us(c.effective_date) if c.effective_date else now,
                        c.prompt_token_cost,
                        c.completion_token_cost,
                        c.cache_read_input_token_cost,
                        c.cache_creation_input_token_cost,
                        c.prompt_token_cost_unit,
                        c.completion_token_cost_unit,
                        user_id,
                        now,
                    ),
                )
                ids.append((cost_id, llm_id))
        return ids

    def query(
        self,
        user_id: str,
        project_id: str,
        fields: Sequence[str] | None,
        expr: Any,
        sort: Sequence[tuple[str, str]],
        limit: int | None,
        offset: int | None,
    ) -> list[dict[str, Any]]:
        pid = self.base.pid(user_id, project_id)
        if pid is None:
            return []
        names = [f for f in fields if f in PRICE_COLUMNS] if fields else list(PRICE_COLUMNS)
        where, params = "pid = ? AND pricing_level = 'project'", [pid]
        if expr is not None:
            cond = translate(expr, COST_FIELDS)
            where += f" AND {cond.sql}"
            params.extend(cond.params)
        order, order_params = order_by(list(sort), COST_FIELDS, "created_at ASC, rowid ASC")
        # no known field asked for: an empty object per price
        select = ", ".join(iso_sql(n) if n == "effective_date" else n for n in names) or "NULL"
        rows = self.base.db.conn.execute(
            f"SELECT {select} FROM llm_token_prices WHERE {where}{order} LIMIT ? OFFSET ?",
            (*params, *order_params, limit if limit is not None else -1, offset or 0),
        )
        return [dict(zip(names, row[: len(names)], strict=True)) for row in rows]

    def purge(self, user_id: str, project_id: str, expr: Any) -> None:
        ids = ids_of_purge_query(expr, allow_in=True, message="Can only purge by specifying one or more ids")
        pid = self.base.pid(user_id, project_id)
        if pid is None:
            return
        with self.base.db.write() as conn:
            conn.execute(
                f"DELETE FROM llm_token_prices WHERE pid = ? AND pricing_level = 'project'"
                f" AND id IN ({', '.join('?' * len(ids))})",
                (pid, *ids),
            )

    def prices(self, conn: Any, pid: int, llm_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
        """Project and default price rows of these models, newest first."""
        if not llm_ids:
            return {}
        rows = conn.execute(
            "SELECT * FROM llm_token_prices WHERE (pid = ? OR pid IS NULL) AND llm_id IN"
            f" ({', '.join('?' * len(llm_ids))}) ORDER BY effective_date DESC",
            (pid, *llm_ids),
        )
        out: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            out.setdefault(row["llm_id"], []).append(dict(row))
        return out


def _pick(rows: list[dict[str, Any]], started_at: int) -> dict[str, Any] | None:
    """Prefer prices in effect when the call started, then project over default, then the newest."""
    if not rows:
        return None
    return min(
        rows,
        key=lambda r: (r["effective_date"] > started_at, r["pid"] is None, -r["effective_date"]),
    )


def call_costs(
    usage: dict[str, Any], prices: dict[str, list[dict[str, Any]]], started_at: int
) -> dict[str, Any]:
    """``summary.weave.costs``: per model of ``summary.usage``, the tokens and what they cost."""
    out: dict[str, Any] = {}
    for llm_id, u in usage.items():
        if not isinstance(u, dict):
            continue
        row = _pick(prices.get(llm_id, []), started_at)
        if row is None:
            continue
        prompt = (u.get("prompt_tokens") or 0) + (u.get("input_tokens") or 0)
        completion = (u.get("completion_tokens") or 0) + (u.get("output_tokens") or 0)
        cache_read = u.get("cache_read_input_tokens") or 0
        cache_creation = u.get("cache_creation_input_tokens") or 0
        out[llm_id] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "requests": u.get("requests") or 0,
            "total_tokens": u.get("total_tokens") or 0,
            "cache_read_input_tokens": cache_read,
            "cache_creation_input_tokens": cache_creation,
            "prompt_tokens_total_cost": (prompt - cache_read - cache_creation) * row["prompt_token_cost"],
            "completion_tokens_total_cost": completion * row["completion_token_cost"],
            "cache_read_input_tokens_total_cost": cache_read * row["cache_read_input_token_cost"],
            "cache_creation_input_tokens_total_cost": cache_creation * row["cache_creation_input_token_cost"],
            "prompt_token_cost": row["prompt_token_cost"],
            "completion_token_cost": row["completion_token_cost"],
            "cache_read_input_token_cost": row["cache_read_input_token_cost"],
            "cache_creation_input_token_cost": row["cache_creation_input_token_cost"],
            "prompt_token_cost_unit": row["prompt_token_cost_unit"],
            "completion_token_cost_unit": row["completion_token_cost_unit"],
            "effective_date": iso(row["effective_date"]),
            "provider_id": row["provider_id"],
            "pricing_level": row["pricing_level"],
            "pricing_level_id": row["pricing_level_id"],
            "created_at": iso(row["created_at"]),
            "created_by": row["created_by"],
        }
    return out
