"""B3 without a runtime: what ``@tidings.tool`` reads from a function's signature (the JSON
schema the model is offered) and how it treats the arguments and return values of a call."""

from __future__ import annotations

import enum
import json
import threading
from typing import Annotated, Any, Literal

import pydantic
import pytest

import tidings
from tidings import Tool, ToolContext, ToolOutput

CTX = ToolContext(tidings.types.ConversationId("conv_1"), tidings.types.RunId("run_1"), "call_1")


class Unit(enum.Enum):
    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


class Place(pydantic.BaseModel):
    city: str
    country: str = pydantic.Field(default="NL", description="ISO country code")


@tidings.tool
def forecast(
    place: Place,
    days: Annotated[int, "How many days ahead"] = 3,
    unit: Unit = Unit.CELSIUS,
    detail: Literal["short", "long"] = "short",
    note: str | None = pydantic.Field(None, description="A remark to keep"),
    tags: list[str] | None = None,
    ctx: ToolContext | None = None,
) -> dict[str, Any]:
    """The weather ahead for a place."""
    return {"city": place.city, "days": days, "unit": unit, "detail": detail,
            "call": ctx.call_id if ctx else None, "tags": tags}


async def test_b3_the_schema_comes_from_the_signature_and_the_docstring() -> None:
    assert isinstance(forecast, Tool)
    assert forecast.name == "forecast"
    assert forecast.description == "The weather ahead for a place."
    schema = forecast.parameters
    props = schema["properties"]
    assert set(props) == {"place", "days", "unit", "detail", "note", "tags"}  # no ctx
    assert schema["required"] == ["place"]
    assert schema["additionalProperties"] is False
    assert props["days"] == {"type": "integer", "default": 3,
                             "description": "How many days ahead"}
    assert props["detail"]["enum"] == ["short", "long"]
    assert props["note"]["description"] == "A remark to keep"
    assert props["unit"]["default"] == "celsius"
    defs = schema["$defs"]
    assert defs["Unit"]["enum"] == ["celsius", "fahrenheit"]
    assert defs["Place"]["required"] == ["city"]
    assert defs["Place"]["properties"]["country"]["description"] == "ISO country code"
    assert props["place"] == {"$ref": "#/$defs/Place"}
    json.dumps(schema)  # what goes to a provider is plain JSON


async def test_b3_good_arguments_are_converted_and_the_result_is_json() -> None:
    out = await forecast.handler(CTX, {"place": {"city": "Delft"}, "days": "2",
                                       "unit": "fahrenheit"})
    assert isinstance(out, str)
    assert json.loads(out) == {"city": "Delft", "days": 2, "unit": "fahrenheit",
                               "detail": "short", "call": "call_1", "tags": None}


async def test_b3_bad_arguments_name_every_field_and_the_function_does_not_run() -> None:
    calls: list[str] = []

    @tidings.tool
    def weather(city: str) -> str:
        """The weather in a city."""
        calls.append(city)
        return "sunny"

    out = await weather.handler(CTX, {"town": 42})
    assert isinstance(out, ToolOutput)
    assert out.is_error
    assert out.meta == {"error": "invalid_arguments"}
    body = json.loads(out.content)
    assert body["error"] == "invalid_arguments"
    assert [(f["loc"], f["type"]) for f in body["fields"]] == [
        (["city"], "missing"), (["town"], "extra_forbidden")]
    assert "city" in body["message"]
    assert "town" in body["message"]
    mistyped = json.loads((await forecast.handler(CTX, {"place": {"city": 7}, "unit": "kelvin"}))
                          .content)  # type: ignore[union-attr]
    assert [f["loc"] for f in mistyped["fields"]] == [["place", "city"], ["unit"]]
    assert calls == []


async def test_b3_options_name_describe_and_flag_the_tool() -> None:
    @tidings.tool(name="lookup-user", description="Find a user.", read_only=True,
                  needs_approval=True)
    async def find(user_id: int) -> None:
        """Not this text."""

    assert (find.name, find.description, find.read_only, find.needs_approval) == (
        "lookup-user", "Find a user.", True, True)
    assert await find.handler(CTX, {"user_id": 1}) == ""  # None is an empty result

    def noop() -> str:
        return "x"

    plain = tidings.tool(noop)
    assert plain.description == ""
    assert (plain.read_only, plain.needs_approval) == (False, False)


async def test_b3_return_values_text_models_lists_and_tool_outputs() -> None:
    @tidings.tool
    async def echo(kind: str) -> object:
        """Return something of the kind asked."""
        return {"text": "as is", "model": Place(city="Oslo"), "list": [1, "a"],
                "output": ToolOutput("custom", meta={"k": 1})}[kind]

    assert await echo.handler(CTX, {"kind": "text"}) == "as is"
    assert json.loads(str(await echo.handler(CTX, {"kind": "model"}))) == {
        "city": "Oslo", "country": "NL"}
    assert await echo.handler(CTX, {"kind": "list"}) == '[1,"a"]'
    assert await echo.handler(CTX, {"kind": "output"}) == ToolOutput("custom", meta={"k": 1})


async def test_b3_a_sync_function_runs_off_the_event_loop_thread() -> None:
    @tidings.tool
    def where() -> str:
        """Which thread runs this."""
        return threading.current_thread().name

    assert await where.handler(CTX, {}) != threading.current_thread().name


async def test_b3_a_parameter_named_like_a_pydantic_attribute_keeps_its_name() -> None:
    @tidings.tool
    def describe(schema: str, json: int = 1, model_config: str = "", model_name: str = "") -> str:
        """Names pydantic's own models use."""
        return f"{schema}/{json}/{model_config}/{model_name}"

    assert set(describe.parameters["properties"]) == {"schema", "json", "model_config",
                                                      "model_name"}
    assert await describe.handler(CTX, {"schema": "s", "json": 2, "model_config": "c",
                                        "model_name": "n"}) == "s/2/c/n"
    bad = await describe.handler(CTX, {"json": "x"})
    assert isinstance(bad, ToolOutput)
    assert [f["loc"] for f in json_fields(bad)] == [["schema"], ["json"]]


def json_fields(output: ToolOutput) -> list[dict[str, Any]]:
    fields: list[dict[str, Any]] = json.loads(output.content)["fields"]
    return fields


def test_b3_signatures_a_tool_cannot_offer_are_refused_when_decorated() -> None:
    def star(*names: str) -> str:
        return ""

    with pytest.raises(TypeError, match="names"):
        tidings.tool(star)
    with pytest.raises(ValueError, match="not a valid identifier"):
        tidings.tool(name="has space")(lambda: "")
