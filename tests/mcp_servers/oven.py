"""An oven MCP server written with FastMCP and ``fastmcp-tasks`` (the tasks extension of the
2026-07-28 revision, SEP-2663), run as a stdio subprocess.

``bake(what)`` runs as a task for a client that declares the extension (FastMCP decides); it
writes a line to ``runs.log`` in ``OVEN_DIR`` each time its body starts, then waits for a
marker there: ``<what>.done`` completes it (``baked <what>``), ``<what>.fail`` fails it. A body
that is cancelled leaves ``<what>.cancelled``. ``weigh(what)`` is an ordinary tool.

With ``--http PORT`` it serves streamable HTTP on loopback instead: its tasks then outlive the
client that started them, and a new session follows them by id.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from fastmcp import FastMCP
from fastmcp.exceptions import ToolError
from fastmcp_tasks import TasksExtension

STATE = Path(os.environ.get("OVEN_DIR", "."))

server = FastMCP("oven")
server.add_extension(TasksExtension(url="memory://"))


@server.tool(task=True)
async def bake(what: str) -> str:
    """Bake something; it is ready when the test says so."""
    with (STATE / "runs.log").open("a") as runs:
        runs.write(f"{what}\n")
    try:
        while not (STATE / f"{what}.done").exists():
            if (STATE / f"{what}.fail").exists():
                raise ToolError("the oven broke")
            await asyncio.sleep(0.05)
    except asyncio.CancelledError:
        (STATE / f"{what}.cancelled").touch()
        raise
    return f"baked {what}"


@server.tool
def weigh(what: str) -> str:
    """Weigh something, at once."""
    return f"{what}: 1 kg"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run(transport="http", host="127.0.0.1", port=int(sys.argv[2]),
                   show_banner=False)
    else:
        server.run(show_banner=False)
