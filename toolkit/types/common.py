"""Base classes shared by every wire model."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Generic, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

T = TypeVar("T")

# An integer a SQLite column or bound parameter holds (a 4xx beyond it, not an OverflowError's 500).
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
Int64 = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]


def utc_representable(value: datetime) -> datetime:
    """``value`` if its UTC form is a datetime too, else ``ValueError``: an offset can take a time
    of year 1 or 9999 out of datetime's range once made UTC (``0001-01-01T00:00:00+00:07``), which
    every store of times (UTC microseconds, ``...Z`` text) has to do. Naive times are taken as UTC."""
    if value.tzinfo is not None:
        try:
            value.astimezone(UTC)
        except OverflowError:
            raise ValueError(
                f"date-time {value.isoformat()} is out of range in UTC (0001-01-01 to 9999-12-31)"
            ) from None
    return value


# Every date-time field of the wire: a datetime whose UTC form exists (a 4xx otherwise, not a 500).
DateTime = Annotated[datetime, AfterValidator(utc_representable)]


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
