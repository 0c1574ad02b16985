"""Base classes shared by every wire model."""

from __future__ import annotations

from typing import Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

T = TypeVar("T")


class WireModel(BaseModel):
    """A wire object: unknown keys are kept (peers add fields over time) and round-trip on dump."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


class ListEnvelope(WireModel, Generic[T]):
    """The cursor-page envelope of the training API (checkpoints, events)."""

    object: Literal["list"] = "list"
    data: list[T]
    has_more: bool = False
    first_id: str | None = None
    last_id: str | None = None
