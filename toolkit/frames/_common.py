"""Typed frames: the column dtypes, :func:`frame` (known columns typed, extra ones inferred) and the
helpers every ``*_frame`` function of :mod:`toolkit.frames` shares."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from numbers import Number
from typing import Any, TypeVar

import numpy as np
import pandas as pd
from pydantic import BaseModel

from .._text import INVISIBLE, escape

M = TypeVar("M", bound=BaseModel)
STR: Any = pd.StringDtype()
INT: Any = pd.Int64Dtype()
FLOAT: Any = np.dtype("float64")
TIME: Any = pd.DatetimeTZDtype("ns", "UTC")
BOOL: Any = pd.BooleanDtype()


def _is_number(value: object) -> bool:
    return isinstance(value, Number) and not isinstance(value, complex)


def _typed(df: pd.DataFrame, columns: Mapping[str, Any]) -> pd.DataFrame:
    """Cast the known columns; extra columns become float when every value is a number, else text.
    Text shows control characters as escapes (``\\x0b``: :func:`toolkit._text.visible`)."""
    for name in df.columns:
        kind = columns.get(name)
        if kind == TIME:
            df[name] = pd.to_datetime(df[name], utc=True, format="ISO8601").astype(TIME)
        elif kind is not None:
            df[name] = df[name].astype(kind)
        elif all(_is_number(v) for v in df[name].dropna()):
            df[name] = df[name].astype(FLOAT)
        else:
            df[name] = df[name].map(lambda v: v if v is None or isinstance(v, str) else json.dumps(v))
            df[name] = df[name].astype(STR)
        if df[name].dtype == STR:
            df[name] = df[name].str.replace(INVISIBLE, escape, regex=True)
    return df


def frame(rows: Sequence[Mapping[str, Any]], columns: Mapping[str, Any]) -> pd.DataFrame:
    """A frame with ``columns`` first (typed, present even when empty) and any extra keys after them."""
    extra = list(dict.fromkeys(k for row in rows for k in row if k not in columns))
    df = pd.DataFrame(list(rows), columns=[*columns, *extra])
    return _typed(df.astype(object).where(df.notna(), None), columns)


def with_values_first(df: pd.DataFrame, leading: Sequence[str] = ()) -> pd.DataFrame:
    """The ``leading`` columns, then the others by how many values they hold (most first, ties in
    their order); columns without a single value are left out."""
    counts = df.notna().sum()
    rest = [c for c in df.columns if c not in leading and counts[c] > 0]
    rest.sort(key=lambda c: -int(counts[c]))
    return df[[c for c in leading if c in df.columns] + rest]


def as_model(model: type[M], value: M | Mapping[str, Any]) -> M:
    return value if isinstance(value, model) else model.model_validate(value)


def flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one level of dotted keys (``lora_config.r``)."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, Mapping):
            out |= flatten(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out
