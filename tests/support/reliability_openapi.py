"""The OpenAPI document the fuzzer works from: the app's own, completed and bounded for fuzzing.

- Routes that parse their body themselves (the trace service reads raw bytes) get the request body
  of the pydantic model their dependency validates.
- Request bodies use their own copy of the component schemas, with arrays of at most ``MAX_ITEMS``
  items and objects of at most ``MAX_PROPERTIES`` properties beyond the required ones (unbounded
  nested JSON made generating one ``/log`` body take seconds). Response schemas stay as declared.
- Where the wire declares an open object, request bodies also get the shapes the server reads in it
  (``TOOL_CALLING``): chat messages (system/user text and parts, assistant messages with one or
  several tool calls, tool results) and tools' JSON-Schema ``parameters``, beside any object.
  Body fields naming real things (models, projects) are aimed by ``reliability_fuzzing.aim``.
"""

from __future__ import annotations

import copy
import inspect
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fastapi.routing import APIRoute
from pydantic import BaseModel

from toolkit.server.app import create_app
from toolkit.server.settings import Settings
from toolkit.server.traces.routes.batch_body import batch_items
from toolkit.types import traces as trace_types
from toolkit.types.chat import ChatCompletionRequest

MAX_ITEMS = 3
MAX_PROPERTIES = 4
REFS = "#/components/schemas/"


def fuzz_document() -> dict[str, Any]:
    app = create_app(Settings(data_dir=Path("unused")))
    doc = copy.deepcopy(app.openapi())
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    for path, route in api_routes(app.routes):
        model = parsed_model(route) if route.include_in_schema else None
        for method in route.methods if model else ():
            body = model.model_json_schema(ref_template=REFS + "Parsed{model}")
            schemas.update({f"Parsed{k}": v for k, v in body.pop("$defs", {}).items()})
            doc["paths"][path][method.lower()].setdefault(
                "requestBody", {"required": True, "content": {"application/json": {"schema": body}}}
            )
    for path, model in DECLARED_BODIES.items():
        body = model.model_json_schema(ref_template=REFS + "Parsed{model}")
        schemas.update({f"Parsed{k}": v for k, v in body.pop("$defs", {}).items()})
        body["properties"]["messages"] = {"anyOf": [MESSAGES, body["properties"]["messages"]]}
        doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"] = body
    for name, schema in list(schemas.items()):
        schemas[f"Req{name}"] = bounded(schema)
    for (component, prop), shape in TOOL_CALLING.items():
        for name in (f"Req{component}", f"ReqParsed{component}"):
            if name in schemas:
                field = schemas[name]["properties"][prop]
                schemas[name]["properties"][prop] = bounded({"anyOf": [shape, field]})
    for path_item in doc["paths"].values():
        for operation in path_item.values():
            if "requestBody" in operation:
                operation["requestBody"] = bounded(operation["requestBody"])
    return doc


TEXT = {"type": "string", "maxLength": 24}
NAME = {"anyOf": [{"enum": ["add", "search", "get_weather"]}, TEXT]}
TOOL_CALL = {
    "type": "object",
    "required": ["id", "type", "function"],
    "properties": {
        "id": TEXT,
        "type": {"enum": ["function"]},
        "function": {
            "type": "object",
            "required": ["name", "arguments"],
            "properties": {"name": NAME, "arguments": {"anyOf": [{"enum": ["{}", '{"a": 1}']}, TEXT]}},
        },
    },
}
PARTS = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["type", "text"],
        "properties": {"type": {"enum": ["text"]}, "text": TEXT},
    },
}
MESSAGE = {
    "anyOf": [
        {
            "type": "object",
            "required": ["role", "content"],
            "properties": {
                "role": {"enum": ["system", "developer", "user"]},
                "content": {"anyOf": [TEXT, PARTS]},
            },
        },
        {
            "type": "object",
            "required": ["role", "tool_calls"],
            "properties": {
                "role": {"enum": ["assistant"]},
                "content": {"anyOf": [TEXT, {"type": "null"}]},
                "tool_calls": {"type": "array", "items": TOOL_CALL},
            },
        },
        {
            "type": "object",
            "required": ["role", "tool_call_id", "content"],
            "properties": {"role": {"enum": ["tool"]}, "tool_call_id": TEXT, "name": NAME, "content": TEXT},
        },
    ]
}
PARAMETERS = {
    "type": "object",
    "required": ["type", "properties"],
    "properties": {
        "type": {"enum": ["object"]},
        "properties": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["type"],
                "properties": {
                    "type": {"enum": ["string", "integer", "number", "boolean", "array", "object", "null"]},
                    "enum": {"type": "array"},
                },
            },
        },
        "required": {"type": "array", "items": TEXT},
    },
}
MESSAGES = {"type": "array", "items": MESSAGE}
# (component, property) -> the shape the server reads in that open field, offered beside it
TOOL_CALLING = {
    ("ToolFunction", "parameters"): PARAMETERS,
    ("ToolFunction", "name"): NAME,
    ("NamedFunction", "name"): NAME,
}
# routes that declare any JSON as their body and validate it themselves: the model they validate
# it with (invalid data still comes from schemathesis' negative mode)
DECLARED_BODIES: dict[str, type[BaseModel]] = {"/v1/chat/completions": ChatCompletionRequest}


def bounded(node: Any) -> Any:
    """A copy pointing at the ``Req`` components, with every array and object bounded."""
    node = json.loads(json.dumps(node).replace(f'"{REFS}', f'"{REFS}Req'))
    _bound(node)
    return node


def _bound(node: Any) -> None:
    if isinstance(node, dict):
        if node.get("type") == "array":
            node.setdefault("maxItems", MAX_ITEMS)
        if node.get("type") == "object" or "additionalProperties" in node:
            node.setdefault("maxProperties", len(node.get("required", ())) + MAX_PROPERTIES)
        for value in node.values():
            _bound(value)
    elif isinstance(node, list):
        for value in node:
            _bound(value)


def api_routes(routes: list[Any], prefix: str = "") -> Iterator[tuple[str, APIRoute]]:
    """Every endpoint with its full path, inside included routers too (FastAPI keeps them nested,
    each inclusion with the prefix it adds)."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield prefix + route.path_format, route
        elif hasattr(route, "original_router"):
            yield from api_routes(route.original_router.routes, prefix + route.include_context.prefix)


# body parsers that decode without a model on their common path, and the model they validate by
BODY_PARSERS: dict[Any, type[BaseModel]] = {batch_items: trace_types.CallCreateBatchReq}


def parsed_model(route: APIRoute) -> type[BaseModel] | None:
    """The pydantic model a dependency of ``route`` validates the raw body with, if any."""
    for dep in route.dependant.dependencies:
        if dep.call in BODY_PARSERS:
            return BODY_PARSERS[dep.call]
        for value in inspect.getclosurevars(dep.call).nonlocals.values() if dep.call else ():
            if isinstance(value, type) and issubclass(value, BaseModel):
                return value
    return None


def date_time_fields(doc: dict[str, Any]) -> set[str]:
    """``"METHOD path field"`` for every date-time field of every request (body or parameter) of
    ``doc``; ``field`` is dotted, ``[]`` for an array's items and ``{}`` for a map's values."""
    schemas = doc.get("components", {}).get("schemas", {})
    found: set[str] = set()

    def walk(node: Any, field: str, seen: frozenset[str], where: str) -> None:
        if not isinstance(node, dict):
            return
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[1]
            if name not in seen:
                walk(schemas[name], field, seen | {name}, where)
            return
        if node.get("format") == "date-time":
            found.add(f"{where} {field}")
        for sub in (*node.get("anyOf", ()), *node.get("oneOf", ()), *node.get("allOf", ())):
            walk(sub, field, seen, where)
        for name, sub in node.get("properties", {}).items():
            walk(sub, f"{field}.{name}" if field else name, seen, where)
        walk(node.get("items"), field + "[]", seen, where)
        walk(node.get("additionalProperties"), field + "{}", seen, where)

    for path, item in doc["paths"].items():
        for method, operation in item.items():
            where = f"{method.upper()} {path}"
            for content in operation.get("requestBody", {}).get("content", {}).values():
                walk(content.get("schema"), "", frozenset(), where)
            for param in operation.get("parameters", ()):
                walk(param.get("schema"), param["name"], frozenset(), where)
    return found
