"""What every trace-service model shares: ids, the query language, sorting, the empty answer."""

from __future__ import annotations

import os
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..common import WireModel

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


class Empty(WireModel):
    """``{}``: the answer of writes that return nothing."""
