"""A weather MCP server: run as a stdio subprocess, or over streamable HTTP with ``--http PORT``.

Its tools: ``forecast`` (text), ``conditions`` (structured content), ``fail`` (an error
result), ``crash`` (the process exits in the middle of the call, once per marker file),
``pid`` (the process id), ``echo`` (returns its argument: the overhead benchmark's tool).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel

server = MCPServer("weather")


class Conditions(BaseModel):
    """The weather now, in a town."""

    city: str
    temperature_c: float
    sky: str


@server.tool()
def forecast(city: str, days: int = 1) -> str:
    """The forecast for a city, over a number of days."""
    return f"{city}: sunny for {days} day(s), 21 C"


@server.tool()
def conditions(city: str) -> Conditions:
    """The conditions in a city now, as structured content."""
    return Conditions(city=city, temperature_c=18.5, sky="overcast")


@server.tool()
def fail(city: str) -> str:
    """Always fails: the weather station of the city is down."""
    raise ToolError(f"the weather station of {city} is down")


@server.tool()
def crash(city: str) -> str:
    """Exits the whole server in the middle of the call while the marker file
    (``WEATHER_CRASH_MARKER``) exists, removing it first: the next process answers."""
    marker = os.environ.get("WEATHER_CRASH_MARKER", "")
    if marker and Path(marker).exists():
        Path(marker).unlink()
        os._exit(3)
    return f"{city}: the station answered"


@server.tool()
def pid() -> int:
    """This server's process id."""
    return os.getpid()


@server.tool()
def echo(text: str) -> str:
    """Returns its text."""
    return text


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
