"""OTLP trace export: spans decoded with opentelemetry-proto and mapped to calls as Weave maps them
(GenAI/OpenInference/OpenLLMetry attribute conventions for inputs, outputs, usage and model)."""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import UTC, datetime
from typing import Any

from google.protobuf.json_format import MessageToDict, Parse, ParseError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from ...types.traces import CompletedCall
from ..errors import BadRequest

MAX_OP_NAME = 128
MAX_ERRORS = 20
INPUT_KEYS = (
    "ai.prompt",
    "gen_ai.prompt",
    "input.value",
    "mlflow.spanInputs",
    "gen_ai.input.messages",
    "pydantic_ai.all_messages",
    "traceloop.entity.input",
    "gcp.vertex.agent.tool_call_args",
    "gcp.vertex.agent.llm_request",
    "input",
    "inputs",
)
OUTPUT_KEYS = (
    "ai.response",
    "gen_ai.completion",
    "output.value",
    "gen_ai.output.messages",
    "mlflow.spanOutputs",
    "final_result",
    "gen_ai.content.completion",
    "traceloop.entity.output",
    "gcp.vertex.agent.tool_response",
    "gcp.vertex.agent.llm_response",
    "output",
    "outputs",
)
USAGE_KEYS = {
    "input_tokens": ("gen_ai.usage.input_tokens",),
    "prompt_tokens": ("gen_ai.usage.prompt_tokens", "llm.token_count.prompt", "ai.usage.promptTokens"),
    "completion_tokens": (
        "gen_ai.usage.completion_tokens",
        "llm.token_count.completion",
        "ai.usage.completionTokens",
    ),
    "output_tokens": ("gen_ai.usage.output_tokens",),
    "total_tokens": ("llm.usage.total_tokens", "llm.token_count.total"),
    "cache_creation_input_tokens": ("gen_ai.usage.cache_creation.input_tokens",),
    "cache_read_input_tokens": ("gen_ai.usage.cache_read.input_tokens",),
}
ATTRIBUTE_KEYS = {
    "system": ("gen_ai.system", "llm.system"),
    "kind": ("openinference.span.kind", "traceloop.span.kind"),
    "model": ("gen_ai.response.model", "gen_ai.request.model", "llm.model_name", "ai.model.id"),
    "provider": ("gen_ai.provider.name", "llm.provider", "ai.model.provider"),
    "operation_name": ("gen_ai.operation.name",),
    "response_id": ("gen_ai.response.id",),
    "finish_reasons": ("gen_ai.response.finish_reasons",),
    "agent_name": ("gen_ai.agent.name",),
    "agent_id": ("gen_ai.agent.id",),
}
ID_KEYS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")
THREAD_KEYS = ("gen_ai.conversation.id", "gcp.vertex.agent.session_id", "wandb.thread_id")


def any_value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [any_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, kind) if kind else None


def flat_attributes(kvs: Any) -> dict[str, Any]:
    return {kv.key: any_value(kv.value) for kv in kvs if isinstance(kv, KeyValue)}


def _maybe_json(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def unflatten(flat: dict[str, Any]) -> dict[str, Any]:
    """``{"a.b": 1, "a.c": 2}`` -> ``{"a": {"b": 1, "c": 2}}``; numeric parts under one key become
    lists; a path that is both a value and a prefix is an error."""
    root: dict[str, Any] = {}
    for key in sorted(flat):
        node = root
        *parents, leaf = key.split(".")
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ValueError(f"conflicting attribute paths at {key!r}")
            node = child
        if leaf in node:
            raise ValueError(f"conflicting attribute paths at {key!r}")
        node[leaf] = _maybe_json(flat[key])
    return _lists(root)


def _lists(node: Any) -> Any:
    if isinstance(node, dict):
        node = {k: _lists(v) for k, v in node.items()}
        if node and all(k.isdigit() for k in node):
            return [node[k] for k in sorted(node, key=int)]
    return node


def _get(tree: dict[str, Any], path: str) -> Any:
    node: Any = tree
    for part in path.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return None
    return node


def _first(tree: dict[str, Any], keys: tuple[str, ...]) -> tuple[str, Any] | None:
    for key in keys:
        value = _get(tree, key)
        if value is not None:
            return key, value
    return None


def _time(nanos: int) -> datetime:
    return datetime.fromtimestamp(nanos // 1_000_000_000, UTC).replace(
        microsecond=(nanos // 1000) % 1_000_000
    )


def _op_name(name: str) -> str:
    if len(name) < MAX_OP_NAME:
        return name
    suffix = ":" + hashlib.sha256(name.encode()).hexdigest()[:4]
    return name[: MAX_OP_NAME - len(suffix)] + suffix


def span_to_call(span: Span, project_id: str) -> CompletedCall:
    flat = flat_attributes(span.attributes)
    tree = unflatten(flat)
    found = False
    inputs: dict[str, Any] = {}
    if (hit := _first(tree, INPUT_KEYS)) is not None:
        found = True
        key, value = hit
        inputs = value if key in ("input", "inputs") and isinstance(value, dict) else {key: value}
    output: Any = None
    if (hit := _first(tree, OUTPUT_KEYS)) is not None:
        found = True
        key, value = hit
        output = value if key in ("output", "outputs") and isinstance(value, dict) else {key: value}
    attributes: dict[str, Any] = {}
    for name, keys in ATTRIBUTE_KEYS.items():
        if (hit := _first(tree, keys)) is not None:
            attributes[name] = hit[1]
    usage = {name: hit[1] for name, keys in USAGE_KEYS.items() if (hit := _first(tree, keys)) is not None}
    found = found or bool(attributes) or bool(usage)
    wandb_attrs = _get(tree, "wandb.attributes")
    if isinstance(wandb_attrs, dict):
        attributes.update(wandb_attrs)
    if not found:
        attributes.update(tree)
    summary: dict[str, Any] = {}
    if usage:
        summary["usage"] = {str(attributes.get("model") or "usage"): usage}
    thread = _first(tree, THREAD_KEYS)
    is_turn = any(bool(_get(tree, k)) for k in (*THREAD_KEYS[:2], "wandb.is_turn"))
    span_id = span.span_id.hex()
    error = span.status.code == Status.STATUS_CODE_ERROR
    return CompletedCall(
        project_id=project_id,
        id=span_id,
        trace_id=span.trace_id.hex(),
        parent_id=span.parent_span_id.hex() or None,
        op_name=_op_name(span.name or "span"),
        display_name=_get(tree, "wandb.display_name"),
        thread_id=str(thread[1]) if thread else None,
        turn_id=span_id if thread and is_turn else None,
        started_at=_time(span.start_time_unix_nano),
        ended_at=_time(span.end_time_unix_nano or span.start_time_unix_nano),
        attributes=attributes,
        inputs=inputs,
        output=output,
        summary=summary,
        exception=(span.status.message or "error") if error else None,
        otel_dump=MessageToDict(span),
    )


def _ids_to_base64(node: Any) -> Any:
    """OTLP JSON writes trace and span ids in hex; protobuf's JSON mapping wants base64."""
    if isinstance(node, list):
        return [_ids_to_base64(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key in ID_KEYS and isinstance(value, str) and value:
            try:
                value = base64.b64encode(bytes.fromhex(value)).decode()
            except ValueError as exc:
                raise BadRequest(f"Invalid {key}: {value!r}") from exc
        out[key] = _ids_to_base64(value)
    return out


def from_json(body: Any) -> ExportTraceServiceRequest:
    """An OTLP JSON export (``{"resourceSpans": [...]}``) as the protobuf message."""
    message = ExportTraceServiceRequest()
    try:
        Parse(json.dumps(_ids_to_base64(body)), message, ignore_unknown_fields=True)
    except ParseError as exc:
        raise BadRequest(f"Invalid OTLP trace export: {exc}") from exc
    return message


def project_of(resource_attrs: dict[str, Any], header: str | None) -> str:
    if header:
        return header
    entity, project = resource_attrs.get("wandb.entity"), resource_attrs.get("wandb.project")
    if entity and project:
        return f"{entity}/{project}"
    raise BadRequest(
        "Missing project: send the project_id header or wandb.entity/wandb.project resource attributes"
    )


def decode(
    request: ExportTraceServiceRequest, header_project: str | None
) -> tuple[list[CompletedCall], list[str]]:
    """Calls of every span, and the messages of the spans rejected."""
    calls: list[CompletedCall] = []
    errors: list[str] = []
    for resource_spans in request.resource_spans:
        project = project_of(flat_attributes(resource_spans.resource.attributes), header_project)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                try:
                    calls.append(span_to_call(span, project))
                except ValueError as exc:
                    errors.append(f"span {span.span_id.hex()}: {exc}")
    return calls, errors
