"""Reading refs: an object or op version, then the path of its ref (keys, attributes, list
indexes, table rows by digest or index), following nested refs on the way."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import BadRequest, NotFound
from .common import loads
from .objects import Objects
from .refs import PREFIX, parse_ref
from .tables import Tables

MAX_REFS = 1000


class RefReader:
    def __init__(self, objects: Objects, tables: Tables) -> None:
        self.objects = objects
        self.tables = tables
        self.base = objects.base

    def read(self, user_id: str, uris: Sequence[str]) -> list[Any]:
        if len(uris) > MAX_REFS:
            raise BadRequest(f"Cannot read more than {MAX_REFS} refs at once")
        return [self._resolve(user_id, uri) for uri in uris]

    def _resolve(self, user_id: str, uri: str) -> Any:
        ref = parse_ref(uri)
        if ref.kind not in ("object", "op"):
            raise BadRequest(f"Reading {ref.kind} refs is not supported: {uri}")
        pid = self.base.pid(user_id, ref.project_id)
        try:
            row = self.objects.version_row(pid, ref.name, ref.digest)
        except NotFound as exc:
            if "deleted_at" in exc.extra:
                return None
            raise NotFound(f"Ref not found: {uri}", missing_object_digests=[ref.digest]) from exc
        val = loads(row["val"])
        for edge, key in ref.extra:
            val = self._step(user_id, val, edge, key, uri)
        return val

    def _step(self, user_id: str, val: Any, edge: str, key: str, uri: str) -> Any:
        if isinstance(val, str) and val.startswith(PREFIX):
            target = parse_ref(val)
            if target.kind == "table" and edge in ("id", "index"):
                return self._table_row(user_id, target.project_id, target.digest, edge, key, uri)
            val = self._resolve(user_id, val)
        if edge in ("key", "attr") and isinstance(val, dict) and key in val:
            return val[key]
        if (
            edge == "index"
            and isinstance(val, list)
            and key.lstrip("-").isdigit()
            and -len(val) <= int(key) < len(val)
        ):
            return val[int(key)]
        raise NotFound(f"Ref path not found: {uri}")

    def _table_row(self, user_id: str, project_id: str, digest: str, edge: str, key: str, uri: str) -> Any:
        pid = self.base.pid(user_id, project_id)
        digests = self.tables.row_digests(pid, digest)
        if edge == "index":
            if not key.isdigit() or int(key) >= len(digests):
                raise NotFound(f"Ref path not found: {uri}")
            key = digests[int(key)]
        elif key not in digests:
            raise NotFound(f"Ref path not found: {uri}")
        found, value = self.tables.row_value(pid, key)
        if not found:
            raise NotFound(f"Ref path not found: {uri}")
        return value
