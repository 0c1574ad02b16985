"""Calls: ingest (start, end, whole calls, batches), reads, updates, deletes, queries and stats."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from ..common import DateTime, Int64, WireModel
from .common import Empty, IngestModel, Json, Query, SortBy


class LLMUsage(WireModel):
    prompt_tokens: Int64 | None = None
    input_tokens: Int64 | None = None
    completion_tokens: Int64 | None = None
    output_tokens: Int64 | None = None
    requests: Int64 | None = None
    total_tokens: Int64 | None = None
    cache_creation_input_tokens: Int64 | None = None
    cache_read_input_tokens: Int64 | None = None


class StartedCall(IngestModel):
    """``StartedCallSchemaForInsert``: the start of a call (``id``/``trace_id`` generated if absent)."""

    project_id: str
    id: str | None = None
    op_name: str
    display_name: str | None = None
    trace_id: str | None = None
    parent_id: str | None = None
    thread_id: str | None = None
    turn_id: str | None = None
    started_at: DateTime
    attributes: dict[str, Any] = Field(default_factory=dict)
    inputs: dict[str, Any] = Field(default_factory=dict)
    otel_dump: dict[str, Any] | None = None
    wb_user_id: str | None = None
    wb_run_id: str | None = None
    wb_run_step: Int64 | None = None


class EndedCall(IngestModel):
    """``EndedCallSchemaForInsert``: the end of a call started earlier."""

    project_id: str
    id: str
    trace_id: str | None = None
    ended_at: DateTime
    started_at: DateTime | None = None
    exception: str | None = None
    output: Json = None
    summary: dict[str, Any] = Field(default_factory=dict)
    wb_run_step_end: Int64 | None = None


class CompletedCall(IngestModel):
    """``CompletedCallSchemaForInsert``: a whole call at once (``/v2/{entity}/{project}/calls/complete``)."""

    project_id: str
    id: str
    trace_id: str
    op_name: str
    display_name: str | None = None
    parent_id: str | None = None
    thread_id: str | None = None
    turn_id: str | None = None
    started_at: DateTime
    ended_at: DateTime
    attributes: dict[str, Any] = Field(default_factory=dict)
    inputs: dict[str, Any] = Field(default_factory=dict)
    output: Json = None
    summary: dict[str, Any] = Field(default_factory=dict)
    exception: str | None = None
    otel_dump: dict[str, Any] | None = None
    wb_user_id: str | None = None
    wb_run_id: str | None = None
    wb_run_step: Int64 | None = None
    wb_run_step_end: Int64 | None = None


class Call(WireModel):
    """``CallSchema``: a call as read back; ``summary.weave`` holds the derived fields
    (``status``, ``latency_ms``, ``trace_name``/``display_name``, and on request ``costs``, ``feedback``)."""

    id: str
    project_id: str
    op_name: str
    trace_id: str
    started_at: DateTime
    attributes: dict[str, Any] = Field(default_factory=dict)
    inputs: dict[str, Any] = Field(default_factory=dict)
    display_name: str | None = None
    parent_id: str | None = None
    thread_id: str | None = None
    turn_id: str | None = None
    ended_at: DateTime | None = None
    exception: str | None = None
    output: Json = None
    summary: dict[str, Any] | None = None
    wb_user_id: str | None = None
    wb_run_id: str | None = None
    wb_run_step: Int64 | None = None
    wb_run_step_end: Int64 | None = None
    deleted_at: DateTime | None = None
    storage_size_bytes: Int64 | None = None
    total_storage_size_bytes: Int64 | None = None


class CallStartReq(IngestModel):
    start: StartedCall


class CallStartRes(WireModel):
    id: str
    trace_id: str


class CallEndReq(IngestModel):
    end: EndedCall


class CallBatchStart(IngestModel):
    mode: Literal["start"] = "start"
    req: CallStartReq


class CallBatchEnd(IngestModel):
    mode: Literal["end"] = "end"
    req: CallEndReq


CallBatchItem = Annotated[CallBatchStart | CallBatchEnd, Field(discriminator="mode")]


class CallCreateBatchReq(IngestModel):
    batch: list[CallBatchItem]


class CallCreateBatchRes(WireModel):
    res: list[CallStartRes | Empty]


class CallsCompleteReq(IngestModel):
    batch: list[CompletedCall]


class CallReadReq(WireModel):
    project_id: str
    id: str
    include_costs: bool = False
    include_storage_size: bool = False
    include_total_storage_size: bool = False


class CallReadRes(WireModel):
    call: Call | None = None


class CallUpdateReq(WireModel):
    project_id: str
    call_id: str
    display_name: str | None = None
    wb_user_id: str | None = None


class CallsDeleteReq(WireModel):
    project_id: str
    call_ids: list[str]
    wb_user_id: str | None = None


class CallsDeleteRes(WireModel):
    num_deleted: Int64


class CallsFilter(WireModel):
    op_names: list[str] | None = None
    input_refs: list[str] | None = None
    output_refs: list[str] | None = None
    parent_ids: list[str] | None = None
    trace_ids: list[str] | None = None
    call_ids: list[str] | None = None
    thread_ids: list[str] | None = None
    turn_ids: list[str] | None = None
    trace_roots_only: bool | None = None
    wb_user_ids: list[str] | None = None
    wb_run_ids: list[str] | None = None


class CallsQueryReq(WireModel):
    project_id: str
    filter: CallsFilter | None = None
    limit: Int64 | None = None
    offset: Int64 | None = None
    sort_by: list[SortBy] | None = None
    query: Query | None = None
    include_costs: bool = False
    include_feedback: bool = False
    include_storage_size: bool = False
    include_total_storage_size: bool = False
    columns: list[str] | None = None
    expand_columns: list[str] | None = None
    return_expanded_column_values: bool = True


class CallsQueryStatsReq(WireModel):
    project_id: str
    filter: CallsFilter | None = None
    query: Query | None = None
    limit: Int64 | None = None
    include_total_storage_size: bool = False


class CallsQueryStatsRes(WireModel):
    count: Int64
    has_more: bool = False
    total_storage_size_bytes: Int64 | None = None
