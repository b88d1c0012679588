"""A booking desk MCP server written with FastMCP and ``fastmcp-tasks`` (the 2026-07-28
revision), run as a stdio subprocess: its tools ask a person before they act.

On this revision a tool asks by answering ``input_required`` (the guard pattern): ``book(date)``
asks how many seats, and the client calls again with the person's answer; ``order(item)`` runs
as a task that asks, while it runs, where to deliver (the task waits in ``input_required``
until ``tasks/update`` answers). Each round of a body appends a line to ``runs.log`` in
``DESK_DIR``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import mcp_types
from fastmcp import Context, FastMCP
from fastmcp_tasks import TasksExtension

STATE = Path(os.environ.get("DESK_DIR", "."))

server = FastMCP("desk")
server.add_extension(TasksExtension(url="memory://"))


SEATS = {"type": "object", "properties": {"seats": {"type": "integer", "minimum": 1}},
         "required": ["seats"]}
ADDRESS = {"type": "object", "properties": {"street": {"type": "string"}},
           "required": ["street"]}


def _ask(key: str, message: str, schema: dict[str, Any]) -> mcp_types.InputRequiredResult:
    return mcp_types.InputRequiredResult(input_requests={key: mcp_types.ElicitRequest(
        params=mcp_types.ElicitRequestFormParams(message=message, requested_schema=schema))})


def _asked(ctx: Context, what: str, key: str, message: str, schema: dict[str, Any]
           ) -> dict[str, Any] | str | mcp_types.InputRequiredResult:
    """The person's answer to ``key`` (its content), or what the tool says when there was
    none to act on -- or, the first round, the question."""
    _ran(what)
    answer = (ctx.input_responses or {}).get(key)
    if not isinstance(answer, mcp_types.ElicitResult):
        return _ask(key, message, schema)
    if answer.action != "accept":
        return f"not done: the person chose {answer.action}"
    return dict(answer.content or {})


def _ran(what: str) -> None:
    with (STATE / "runs.log").open("a") as runs:
        runs.write(f"{what}\n")


@server.tool
async def book(date: str, ctx: Context) -> str | mcp_types.InputRequiredResult:
    """Book seats for a date; a person says how many."""
    answer = _asked(ctx, f"book {date}", "seats", f"How many seats on {date}?", SEATS)
    return f"booked {answer['seats']} seats on {date}" if isinstance(answer, dict) else answer


@server.tool(task=True)
async def order(item: str, ctx: Context) -> str | mcp_types.InputRequiredResult:
    """Order an item; a person says where it goes while the order runs."""
    answer = _asked(ctx, f"order {item}", "address", f"Where should the {item} go?", ADDRESS)
    return f"ordered {item} to {answer['street']}" if isinstance(answer, dict) else answer


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run(transport="http", host="127.0.0.1", port=int(sys.argv[2]),
                   show_banner=False)
    else:
        server.run(show_banner=False)
