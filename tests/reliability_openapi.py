"""The OpenAPI document the fuzzer works from: the app's own, completed and bounded for fuzzing.

- Routes that parse their body themselves (the trace service reads raw bytes) get the request body
  of the pydantic model their dependency validates.
- Request bodies use their own copy of the component schemas, with arrays of at most ``MAX_ITEMS``
  items and objects of at most ``MAX_PROPERTIES`` properties beyond the required ones (unbounded
  nested JSON made generating one ``/log`` body take seconds). Response schemas stay as declared.
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
    for name, schema in list(schemas.items()):
        schemas[f"Req{name}"] = bounded(schema)
    for path_item in doc["paths"].values():
        for operation in path_item.values():
            if "requestBody" in operation:
                operation["requestBody"] = bounded(operation["requestBody"])
    return doc


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


def parsed_model(route: APIRoute) -> type[BaseModel] | None:
    """The pydantic model a dependency of ``route`` validates the raw body with, if any."""
    for dep in route.dependant.dependencies:
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
