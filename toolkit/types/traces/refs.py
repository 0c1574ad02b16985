"""Refs: ``weave:///`` URIs read in batches."""

from __future__ import annotations

from ..common import WireModel
from .common import Json


class RefsReadBatchReq(WireModel):
    refs: list[str]


class RefsReadBatchRes(WireModel):
    vals: list[Json]
