"""Costs: token prices per model, which give calls their ``summary.weave.costs``."""

from __future__ import annotations

from typing import Annotated

from pydantic import WithJsonSchema

from ..common import DateTime, Int64, WireModel
from .common import Query, SortBy


class CostCreateInput(WireModel):
    prompt_token_cost: float
    completion_token_cost: float
    cache_read_input_token_cost: float = 0.0
    cache_creation_input_token_cost: float = 0.0
    prompt_token_cost_unit: str = "USD"
    completion_token_cost_unit: str = "USD"
    effective_date: DateTime | None = None
    provider_id: str | None = None


class CostCreateReq(WireModel):
    project_id: str
    costs: dict[str, CostCreateInput]
    wb_user_id: str | None = None


# ``(cost id, llm id)`` pairs, as Weave sends them; declared as a plain array of two strings because
# OpenAPI checkers (schemathesis) cannot read the ``prefixItems`` pydantic writes for a tuple.
IdPair = Annotated[
    tuple[str, str],
    WithJsonSchema({"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 2}),
]


class CostCreateRes(WireModel):
    ids: list[IdPair]


class CostQueryReq(WireModel):
    project_id: str
    fields: list[str] | None = None
    query: Query | None = None
    sort_by: list[SortBy] | None = None
    limit: Int64 | None = None
    offset: Int64 | None = None


class CostQueryOutput(WireModel):
    id: str | None = None
    llm_id: str | None = None
    prompt_token_cost: float | None = None
    completion_token_cost: float | None = None
    cache_read_input_token_cost: float | None = None
    cache_creation_input_token_cost: float | None = None
    prompt_token_cost_unit: str | None = None
    completion_token_cost_unit: str | None = None
    effective_date: DateTime | None = None
    provider_id: str | None = None


class CostQueryRes(WireModel):
    results: list[CostQueryOutput]


class CostPurgeReq(WireModel):
    project_id: str
    query: Query
