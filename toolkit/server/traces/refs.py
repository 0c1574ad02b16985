"""Weave ref URIs: ``weave:///{entity}/{project}/{object|op|table|call}/{name[:digest]}[/{edge}/{value}]*``."""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import BadRequest

PREFIX = "weave:///"
KINDS = ("object", "op", "table", "call")
EDGES = ("key", "index", "attr", "id")


@dataclass(frozen=True)
class Ref:
    project_id: str
    kind: str
    name: str
    digest: str
    extra: tuple[tuple[str, str], ...] = ()


def parse_ref(uri: str) -> Ref:
    """Split a ref; ``name`` is the call id of a call ref and the digest of a table ref."""
    if not uri.startswith(PREFIX):
        raise BadRequest(f"Invalid ref: {uri}")
    parts = uri[len(PREFIX) :].split("/")
    if len(parts) < 4 or parts[2] not in KINDS or not parts[0] or not parts[1]:
        raise BadRequest(f"Invalid ref: {uri}")
    entity, project, kind, head, *rest = parts
    if len(rest) % 2:
        raise BadRequest(f"Invalid ref path: {uri}")
    extra = tuple((rest[i], urllib.parse.unquote(rest[i + 1])) for i in range(0, len(rest), 2))
    if any(edge not in EDGES for edge, _ in extra):
        raise BadRequest(f"Invalid ref edge: {uri}")
    if kind in ("object", "op"):
        name, sep, digest = head.rpartition(":")
        if not sep or not name or not digest:
            raise BadRequest(f"Invalid ref: {uri}")
    else:
        name, digest = head, head
    return Ref(f"{entity}/{project}", kind, name, digest, extra)


def op_display_name(op_name: str) -> str:
    """``summary.weave.trace_name``: the op's name when ``op_name`` is an op/object ref, else itself."""
    if op_name.startswith(PREFIX):
        try:
            ref = parse_ref(op_name)
        except BadRequest:
            return op_name
        return ref.name if ref.kind in ("op", "object") else op_name
    return op_name


def find_refs(value: Any) -> Iterator[str]:
    """Every ref string anywhere in a JSON value."""
    if isinstance(value, str):
        if value.startswith(PREFIX):
            yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from find_refs(v)
    elif isinstance(value, list):
        for v in value:
            yield from find_refs(v)


def call_ref(project_id: str, call_id: str) -> str:
    return f"{PREFIX}{project_id}/call/{call_id}"
