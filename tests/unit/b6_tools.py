"""Tools a config file imports by path in the config tests (``tests.unit.b6_tools:...``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tidings.tools.registry import Tool, ToolContext


async def _weather(ctx: ToolContext, args: Mapping[str, Any]) -> str:
    return f"sunny in {args['city']}"


weather = Tool(
    "weather", "The weather in a city.", _weather,
    parameters={"type": "object", "properties": {"city": {"type": "string"}},
                "required": ["city"]},
    read_only=True,
)

NOT_A_TOOL = 42


async def forecast(city: str, days: int = 1) -> str:
    """The forecast for a city."""
    return f"{days} days of sun in {city}"


def spread(*cities: str) -> str:
    """No keyword names its cities: it cannot be a tool."""
    return ", ".join(cities)
