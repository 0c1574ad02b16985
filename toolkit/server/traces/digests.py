"""Content digests, computed exactly as Weave computes them (so refs agree across servers)."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable
from typing import Any


def bytes_digest(data: bytes) -> str:
    """URL-safe base64 of SHA-256 with ``-`` -> ``X``, ``_`` -> ``Y`` and no padding (43 chars)."""
    b64 = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode()
    return b64.replace("-", "X").replace("_", "Y").rstrip("=")


def canonical_json(value: Any) -> str:
    """Python's default ``json.dumps`` with sorted keys: the text object and row digests hash."""
    return json.dumps(value, sort_keys=True)


def value_digest(value: Any) -> str:
    """Digest of an object value or a table row."""
    return bytes_digest(canonical_json(value).encode())


def table_digest(row_digests: Iterable[str]) -> str:
    """Hex SHA-256 of the concatenated row digests, in order."""
    h = hashlib.sha256()
    for digest in row_digests:
        h.update(digest.encode())
    return h.hexdigest()
