"""Wire models of the trace service (W&B Weave's trace-server contract), shared by server and client.

Request models tolerate unknown fields (newer Weave clients add some); optional fields default to
``None`` so a dump with ``exclude_none`` sends only what was set. Operator keys of the query language
keep their ``$`` names (``{"$expr": {"$eq": [...]}}``) and are carried as plain JSON.
"""

from __future__ import annotations

import os
import time
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .common import WireModel

Json = Any
SortDirection = Literal["asc", "desc"]


def uuid7() -> str:
    """A time-ordered UUIDv7 string, the id format Weave clients generate."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (
        (ms & (2**48 - 1)) << 80 | 0x7 << 76 | (rand >> 68 & 0xFFF) << 64 | 0b10 << 62 | rand & (2**62 - 1)
    )
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class IngestModel(BaseModel):
    """A call being written: unknown fields are ignored (not kept), which keeps ingest fast."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class Query(WireModel):
    """``{"$expr": <operation>}``: a MongoDB-style expression (``$and $or $not $eq $gt $gte $lt $lte
    $in $contains`` over ``$getField``, ``$literal``, ``$convert``, ``$size`` operands)."""

    expr: dict[str, Any] = Field(alias="$expr")


class SortBy(WireModel):
    field: str
    direction: SortDirection = "asc"


# ----------------------------------------------------------------------------- calls


class LLMUsage(WireModel):
    prompt_tokens: int | None = None
    input_tokens: int | None = None
    completion_tokens: int | None = None
    output_tokens: int | None = None
    requests: int | None = None
    total_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


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
    started_at: datetime
    attributes: dict[str, Any] = Field(default_factory=dict)
    inputs: dict[str, Any] = Field(default_factory=dict)
    otel_dump: dict[str, Any] | None = None
    wb_user_id: str | None = None
    wb_run_id: str | None = None
    wb_run_step: int | None = None


class EndedCall(IngestModel):
    """``EndedCallSchemaForInsert``: the end of a call started earlier."""

    project_id: str
    id: str
    trace_id: str | None = None
    ended_at: datetime
    started_at: datetime | None = None
    exception: str | None = None
    output: Json = None
    summary: dict[str, Any] = Field(default_factory=dict)
    wb_run_step_end: int | None = None


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
    started_at: datetime
    ended_at: datetime
    attributes: dict[str, Any] = Field(default_factory=dict)
    inputs: dict[str, Any] = Field(default_factory=dict)
    output: Json = None
    summary: dict[str, Any] = Field(default_factory=dict)
    exception: str | None = None
    otel_dump: dict[str, Any] | None = None
    wb_user_id: str | None = None
    wb_run_id: str | None = None
    wb_run_step: int | None = None
    wb_run_step_end: int | None = None


class Call(WireModel):
    """``CallSchema``: a call as read back; ``summary.weave`` holds the derived fields
    (``status``, ``latency_ms``, ``trace_name``/``display_name``, and on request ``costs``, ``feedback``)."""

    id: str
    project_id: str
    op_name: str
    trace_id: str
    started_at: datetime
    attributes: dict[str, Any] = Field(default_factory=dict)
    inputs: dict[str, Any] = Field(default_factory=dict)
    display_name: str | None = None
    parent_id: str | None = None
    thread_id: str | None = None
    turn_id: str | None = None
    ended_at: datetime | None = None
    exception: str | None = None
    output: Json = None
    summary: dict[str, Any] | None = None
    wb_user_id: str | None = None
    wb_run_id: str | None = None
    wb_run_step: int | None = None
    wb_run_step_end: int | None = None
    deleted_at: datetime | None = None
    storage_size_bytes: int | None = None
    total_storage_size_bytes: int | None = None


class CallStartReq(IngestModel):
    start: StartedCall


class CallStartRes(WireModel):
    id: str
    trace_id: str


class CallEndReq(IngestModel):
    end: EndedCall


class Empty(WireModel):
    """``{}``: the answer of writes that return nothing."""


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
    num_deleted: int


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
    limit: int | None = None
    offset: int | None = None
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
    limit: int | None = None
    include_total_storage_size: bool = False


class CallsQueryStatsRes(WireModel):
    count: int
    has_more: bool = False
    total_storage_size_bytes: int | None = None


# ----------------------------------------------------------------------------- objects


class ObjForInsert(WireModel):
    project_id: str
    object_id: str
    val: Json
    builtin_object_class: str | None = None
    set_base_object_class: str | None = None
    expected_digest: str | None = None
    wb_user_id: str | None = None


class ObjCreateReq(WireModel):
    obj: ObjForInsert


class ObjCreateRes(WireModel):
    digest: str
    object_id: str | None = None


class Obj(WireModel):
    """``ObjSchema``: one version of an object (``kind`` is ``"op"`` for saved functions)."""

    project_id: str
    object_id: str
    created_at: datetime
    deleted_at: datetime | None = None
    digest: str
    version_index: int
    is_latest: int
    kind: str
    base_object_class: str | None = None
    leaf_object_class: str | None = None
    val: Json = None
    wb_user_id: str | None = None
    size_bytes: int | None = None
    tags: list[str] | None = None
    aliases: list[str] | None = None


class ObjReadReq(WireModel):
    project_id: str
    object_id: str
    digest: str
    metadata_only: bool = False
    include_tags_and_aliases: bool = False


class ObjReadRes(WireModel):
    obj: Obj


class ObjectVersionFilter(WireModel):
    base_object_classes: list[str] | None = None
    exclude_base_object_classes: list[str] | None = None
    leaf_object_classes: list[str] | None = None
    object_ids: list[str] | None = None
    is_op: bool | None = None
    latest_only: bool | None = None
    tags: list[str] | None = None
    aliases: list[str] | None = None


class ObjQueryReq(WireModel):
    project_id: str
    filter: ObjectVersionFilter | None = None
    limit: int | None = None
    offset: int | None = None
    sort_by: list[SortBy] | None = None
    metadata_only: bool = False
    include_storage_size: bool = False
    include_tags_and_aliases: bool = False


class ObjQueryRes(WireModel):
    objs: list[Obj]


class ObjDeleteReq(WireModel):
    project_id: str
    object_id: str
    digests: list[str] | None = None


class DeletedVersion(WireModel):
    digest: str
    base_object_class: str | None = None
    leaf_object_class: str | None = None


class ObjDeleteRes(WireModel):
    num_deleted: int
    deleted_versions: list[DeletedVersion] | None = None


# ----------------------------------------------------------------------------- tables, refs, files


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
    index: int


class TableInsert(WireModel):
    index: int
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
    limit: int | None = None
    offset: int | None = None
    sort_by: list[SortBy] | None = None


class TableRow(WireModel):
    digest: str
    val: Json
    original_index: int | None = None


class TableQueryRes(WireModel):
    rows: list[TableRow]


class TableQueryStatsReq(WireModel):
    project_id: str
    digest: str


class TableQueryStatsRes(WireModel):
    count: int


class RefsReadBatchReq(WireModel):
    refs: list[str]


class RefsReadBatchRes(WireModel):
    vals: list[Json]


class FileCreateRes(WireModel):
    digest: str


class FileContentReadReq(WireModel):
    project_id: str
    digest: str


# ----------------------------------------------------------------------------- costs


class CostCreateInput(WireModel):
    prompt_token_cost: float
    completion_token_cost: float
    cache_read_input_token_cost: float = 0.0
    cache_creation_input_token_cost: float = 0.0
    prompt_token_cost_unit: str = "USD"
    completion_token_cost_unit: str = "USD"
    effective_date: datetime | None = None
    provider_id: str | None = None


class CostCreateReq(WireModel):
    project_id: str
    costs: dict[str, CostCreateInput]
    wb_user_id: str | None = None


class CostCreateRes(WireModel):
    ids: list[tuple[str, str]]


class CostQueryReq(WireModel):
    project_id: str
    fields: list[str] | None = None
    query: Query | None = None
    sort_by: list[SortBy] | None = None
    limit: int | None = None
    offset: int | None = None


class CostQueryOutput(WireModel):
    id: str | None = None
    llm_id: str | None = None
    prompt_token_cost: float | None = None
    completion_token_cost: float | None = None
    cache_read_input_token_cost: float | None = None
    cache_creation_input_token_cost: float | None = None
    prompt_token_cost_unit: str | None = None
    completion_token_cost_unit: str | None = None
    effective_date: datetime | None = None
    provider_id: str | None = None


class CostQueryRes(WireModel):
    results: list[CostQueryOutput]


class CostPurgeReq(WireModel):
    project_id: str
    query: Query


# ----------------------------------------------------------------------------- feedback


class FeedbackCreateReq(WireModel):
    project_id: str
    weave_ref: str
    feedback_type: str
    payload: dict[str, Any]
    id: str | None = None
    creator: str | None = None
    annotation_ref: str | None = None
    runnable_ref: str | None = None
    call_ref: str | None = None
    trigger_ref: str | None = None
    queue_id: str | None = None
    wb_user_id: str | None = None


class FeedbackCreateRes(WireModel):
    id: str
    created_at: datetime
    wb_user_id: str
    payload: dict[str, Any]


class FeedbackCreateBatchReq(WireModel):
    batch: list[FeedbackCreateReq]


class FeedbackCreateBatchRes(WireModel):
    res: list[FeedbackCreateRes]


class FeedbackQueryReq(WireModel):
    project_id: str
    fields: list[str] | None = None
    query: Query | None = None
    sort_by: list[SortBy] | None = None
    limit: int | None = None
    offset: int | None = None


class FeedbackQueryRes(WireModel):
    result: list[dict[str, Any]]
    total_count: int = 0


class FeedbackPurgeReq(WireModel):
    project_id: str
    query: Query


class FeedbackReplaceReq(FeedbackCreateReq):
    feedback_id: str


# ----------------------------------------------------------------------------- threads


class ThreadsQueryFilter(WireModel):
    after_datetime: datetime | None = None
    before_datetime: datetime | None = None
    thread_ids: list[str] | None = None


class ThreadsQueryReq(WireModel):
    project_id: str
    filter: ThreadsQueryFilter | None = None
    limit: int | None = None
    offset: int | None = None
    sort_by: list[SortBy] | None = None


class Thread(WireModel):
    """``ThreadSchema``: the turn calls (``id == turn_id``) of one ``thread_id``, aggregated."""

    thread_id: str
    turn_count: int
    start_time: datetime
    last_updated: datetime
    first_turn_id: str | None = None
    last_turn_id: str | None = None
    p50_turn_duration_ms: float | None = None
    p99_turn_duration_ms: float | None = None


# ----------------------------------------------------------------------------- completions, otel, service


class CompletionsCreateReq(WireModel):
    """``inputs`` is a chat-completion request (``model``, ``messages``, sampling options)."""

    project_id: str
    inputs: dict[str, Any]
    track_llm_call: bool = True
    trace_id: str | None = None
    parent_id: str | None = None
    wb_user_id: str | None = None


class CompletionsCreateRes(WireModel):
    response: dict[str, Any]
    weave_call_id: str | None = None
    trace_id: str | None = None


class OtelPartialSuccess(WireModel):
    rejected_spans: int = 0
    error_message: str = ""


class OtelExportRes(WireModel):
    partial_success: OtelPartialSuccess | None = None


class ServerInfo(WireModel):
    min_required_weave_python_version: str
    trace_server_version: str


class TraceHealth(WireModel):
    status: str = "ok"
