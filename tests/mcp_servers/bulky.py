"""A server of large results and slow calls: run as a stdio subprocess, or over streamable
HTTP with ``--http PORT``.

Its tools: ``blob`` (a text of ``size`` bytes, its lines numbered so that a cut shows where),
``whoami`` (the name and version the client introduced itself with), ``steps`` (takes
``seconds``, reporting progress every ``every`` seconds, or never with ``every`` 0), ``hello``.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("bulky")


def blob_text(size: int) -> str:
    """``size`` bytes of ASCII text: numbered lines of 64 bytes, the last one shorter."""
    lines = [f"{n:08d} " + "x" * 54 + "\n" for n in range(size // 64 + 1)]
    return "".join(lines)[:size]


@server.tool()
def blob(size: int) -> str:
    """A text of ``size`` bytes."""
    return blob_text(size)


@server.tool()
def whoami(ctx: Context) -> str:
    """The client's name and version, as it introduced itself."""
    params = ctx.session.client_params
    if params is not None:
        info = params.client_info
        return f"{info.name} {info.version}"
    meta: Any = ctx.request_context.meta or {}  # the 2026 wire says it on each request
    said: Any = dict(meta).get("io.modelcontextprotocol/clientInfo") or {}
    return f"{said.get('name')} {said.get('version')}"


@server.tool()
async def steps(seconds: float, every: float, ctx: Context) -> str:
    """Takes ``seconds``, reporting progress every ``every`` seconds (never with 0)."""
    start = time.monotonic()
    count = 0
    while time.monotonic() - start < seconds:
        await asyncio.sleep(every or seconds)
        count += 1
        if every:
            await ctx.report_progress(min(time.monotonic() - start, seconds), seconds,
                                      f"step {count}")
    return f"done after {count} steps"


@server.tool()
def hello(name: str) -> str:
    """Greets."""
    return f"hello {name}"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
