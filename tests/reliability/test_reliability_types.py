"""Hypothesis on every wire type: any JSON is either rejected with a ``ValidationError`` (never
another exception) or accepted as a model whose JSON dump validates back to an equal model."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any

import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import toolkit.types

MODULES = [
    importlib.import_module(info.name)
    for info in pkgutil.walk_packages(toolkit.types.__path__, "toolkit.types.")
    if not info.ispkg
]
MODELS = sorted(
    {
        cls
        for module in MODULES
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if issubclass(cls, pydantic.BaseModel) and cls.__module__ == module.__name__
    },
    key=lambda cls: f"{cls.__module__}.{cls.__name__}",
)
EXAMPLES = 15

# JSON values: no NaN or infinities, which JSON cannot carry
numbers = st.integers() | st.floats(allow_nan=False, allow_infinity=False)
scalars = st.none() | st.booleans() | numbers | st.text(max_size=8)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
)


def field_dicts(model: type[pydantic.BaseModel]) -> st.SearchStrategy[dict[str, Any]]:
    """Objects using the model's own field names (and aliases), with arbitrary JSON values."""
    names = [f.alias or n for n, f in model.model_fields.items()] or ["x"]
    return st.dictionaries(st.sampled_from(names), json_values, max_size=len(names))


@pytest.mark.parametrize(
    "model", MODELS, ids=lambda cls: f"{cls.__module__.removeprefix('toolkit.types.')}.{cls.__name__}"
)
def test_any_json_is_rejected_cleanly_or_round_trips(model: type[pydantic.BaseModel]) -> None:
    @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(value=field_dicts(model) | json_values)
    def check(value: Any) -> None:
        try:
            parsed = model.model_validate(value)
        except pydantic.ValidationError:
            return
        dumped = parsed.model_dump_json(by_alias=True)
        assert model.model_validate_json(dumped) == parsed

    check()
