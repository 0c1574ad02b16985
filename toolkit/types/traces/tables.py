"""Tables: content-addressed lists of rows, created whole and updated by append, insert and pop."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ..common import Int64, WireModel
from .common import Json, SortBy


class TableForInsert(WireModel):
    project_id: str
    rows: list[dict[str, Any]]
    expected_digest: str | None = None


class TableCreateReq(WireModel):
    table: TableForInsert


class TableCreateRes(WireModel):
    digest: str
    row_digests: list[str] = Field(default_factory=list)


class TableAppend(WireModel):
    row: dict[str, Any]


class TablePop(WireModel):
    index: Int64


class TableInsert(WireModel):
    index: Int64
    row: dict[str, Any]


class TableUpdate(WireModel):
    """One of ``{"append": {row}}``, ``{"pop": {index}}``, ``{"insert": {index, row}}``."""

    append: TableAppend | None = None
    pop: TablePop | None = None
    insert: TableInsert | None = None


class TableUpdateReq(WireModel):
    project_id: str
    base_digest: str
    updates: list[TableUpdate]


class TableUpdateRes(WireModel):
    digest: str
    updated_row_digests: list[str] = Field(default_factory=list)


class TableRowFilter(WireModel):
    row_digests: list[str] | None = None


class TableQueryReq(WireModel):
    project_id: str
    digest: str
    filter: TableRowFilter | None = None
    limit: Int64 | None = None
    offset: Int64 | None = None
    sort_by: list[SortBy] | None = None


class TableRow(WireModel):
    digest: str
    val: Json
    original_index: Int64 | None = None


class TableQueryRes(WireModel):
    rows: list[TableRow]


class TableQueryStatsReq(WireModel):
    project_id: str
    digest: str


class TableQueryStatsRes(WireModel):
    count: Int64
