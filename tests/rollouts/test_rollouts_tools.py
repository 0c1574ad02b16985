"""Tools as plain functions: JSON schemas from type hints and docstrings, argument checks, results."""

from __future__ import annotations

import enum
from typing import Literal

import pytest
from pydantic import BaseModel

from toolkit.rollouts import FunctionTool, ToolArgumentsError, tool, tool_content


def lookup(key: str, limit: int = 3, exact: bool | None = None) -> str:
    """Find the code stored under a key.

    Longer explanation that is not part of the description.

    Args:
        key: three lowercase letters
        limit (int): how many codes to return,
            at most ten
        exact: whether to match exactly
    """
    return key


class Unit(enum.Enum):
    C = "celsius"
    F = "fahrenheit"


class Place(BaseModel):
    city: str
    country: str = "FR"


def weather(place: Place, unit: Unit, days: list[int], mode: Literal["now", "daily"] = "now") -> dict:
    """Weather of a place.

    :param place: where
    :param unit: the temperature unit
    """
    return {"city": place.city, "unit": unit.value, "days": days, "mode": mode}


def test_schema_from_type_hints_and_a_google_docstring() -> None:
    made = tool(lookup)
    assert isinstance(made, FunctionTool) and made.name == "lookup" and not made.is_async
    assert made.spec.model_dump(exclude_none=True) == {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Find the code stored under a key.",
            "parameters": {
                "type": "object",
                "properties": {
                    "key": {"type": "string", "description": "three lowercase letters"},
                    "limit": {
                        "type": "integer",
                        "default": 3,
                        "description": "how many codes to return, at most ten",
                    },
                    "exact": {
                        "anyOf": [{"type": "boolean"}, {"type": "null"}],
                        "default": None,
                        "description": "whether to match exactly",
                    },
                },
                "required": ["key"],
            },
        },
    }


def test_schema_of_models_enums_lists_and_literals_is_inlined() -> None:
    made = tool(weather)
    parameters = made.parameters
    assert "$defs" not in parameters and "$ref" not in str(parameters)
    assert made.description == "Weather of a place."
    properties = parameters["properties"]
    assert properties["place"] == {
        "type": "object",
        "properties": {"city": {"type": "string"}, "country": {"type": "string", "default": "FR"}},
        "required": ["city"],
        "description": "where",
    }
    assert properties["unit"] == {
        "type": "string",
        "enum": ["celsius", "fahrenheit"],
        "description": "the temperature unit",
    }
    assert properties["days"] == {"type": "array", "items": {"type": "integer"}}
    assert properties["mode"] == {"type": "string", "enum": ["now", "daily"], "default": "now"}
    assert parameters["required"] == ["place", "unit", "days"]


def test_arguments_are_validated_and_converted() -> None:
    made = tool(weather)
    kwargs = made.parse('{"place": {"city": "Paris"}, "unit": "celsius", "days": ["1", 2]}')
    assert kwargs == {"place": Place(city="Paris"), "unit": Unit.C, "days": [1, 2], "mode": "now"}
    assert made(**kwargs) == {"city": "Paris", "unit": "celsius", "days": [1, 2], "mode": "now"}
    assert tool(lookup).parse({"key": "abc"}) == {"key": "abc", "limit": 3, "exact": None}
    with pytest.raises(ToolArgumentsError, match=r"^the arguments are not valid JSON \(Expecting"):
        made.parse('{"place": ')
    with pytest.raises(ToolArgumentsError, match=r"^the arguments must be a JSON object$"):
        made.parse("[1, 2]")
    with pytest.raises(ToolArgumentsError, match=r"^invalid arguments: key: Field required"):
        tool(lookup).parse("{}")
    with pytest.raises(ToolArgumentsError, match=r"extra: Extra inputs are not permitted"):
        tool(lookup).parse('{"key": "abc", "extra": 1}')
    with pytest.raises(ToolArgumentsError, match=r"unit: Input should be 'celsius' or 'fahrenheit'"):
        made.parse('{"place": {"city": "P"}, "unit": "kelvin", "days": []}')


def test_decorator_forms_names_and_async_tools() -> None:
    @tool
    async def fetch(url: str) -> str:
        """Fetch a page."""
        return url

    @tool(name="get-code", description="The code of a key")
    def get(k: str) -> str:
        return k

    assert isinstance(fetch, FunctionTool) and fetch.is_async and fetch.description == "Fetch a page."
    assert get.name == "get-code" and get.description == "The code of a key"
    assert tool(get) is get
    assert tool(lambda: 1, name="one").parameters == {"type": "object", "properties": {}}


def test_functions_a_model_cannot_call_are_refused() -> None:
    def untyped(key):  # type: ignore[no-untyped-def]
        return key

    def star(*keys: str) -> str:
        return ""

    def positional(key: str, /) -> str:
        return key

    with pytest.raises(TypeError, match=r"^tool untyped: parameter key has no type hint$"):
        tool(untyped)
    with pytest.raises(TypeError, match=r"^tool star: parameter keys must be passable by keyword$"):
        tool(star)
    with pytest.raises(TypeError, match=r"^tool positional: parameter key must be passable by keyword$"):
        tool(positional)
    with pytest.raises(ValueError, match="must be 1-64 letters"):
        tool(lookup, name="has space")


def test_tool_content_is_the_string_or_json() -> None:
    assert tool_content("417") == "417"
    assert tool_content({"temp": 18, "city": "Zürich"}) == '{"temp": 18, "city": "Zürich"}'
    assert tool_content(Place(city="Paris")) == '{"city":"Paris","country":"FR"}'
    assert tool_content(None) == "null"
    assert tool_content([Unit.C]) == '["celsius"]'
