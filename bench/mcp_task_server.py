"""The MCP server bench/mcp_figures.py calls: FastMCP with ``fastmcp-tasks`` (the tasks
extension of the 2026-07-28 revision), over stdio, or over streamable HTTP with ``--http PORT``.

Its tools:

- ``work(label)`` runs as a task for a client that declares the extension: its body sleeps
  ``BENCH_TASK_WORK_MS`` (default 200) and returns ``done <label>``; the server suggests
  polling every ``BENCH_TASK_POLL_MS`` (default 50).
- ``blob(size)``: an ordinary tool whose result is a text of ``size`` bytes of ASCII.
"""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import timedelta

from fastmcp import FastMCP
from fastmcp.utilities.tasks import TaskConfig
from fastmcp_tasks import TasksExtension

WORK_S = int(os.environ.get("BENCH_TASK_WORK_MS", "200")) / 1000
POLL = timedelta(milliseconds=int(os.environ.get("BENCH_TASK_POLL_MS", "50")))

server = FastMCP("bench")
server.add_extension(TasksExtension(url="memory://"))


def blob_text(size: int) -> str:
    """``size`` bytes of ASCII text: numbered lines of 64 bytes, the last one shorter."""
    lines = [f"{n:08d} " + "x" * 54 + "\n" for n in range(size // 64 + 1)]
    return "".join(lines)[:size]


@server.tool(task=TaskConfig(mode="optional", poll_interval=POLL))
async def work(label: str) -> str:
    """Work a fixed short time, then say so."""
    await asyncio.sleep(WORK_S)
    return f"done {label}"


@server.tool
def blob(size: int) -> str:
    """A text of ``size`` bytes."""
    return blob_text(size)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run(transport="http", host="127.0.0.1", port=int(sys.argv[2]),
                   show_banner=False)
    else:
        server.run(show_banner=False)
