"""The demo's MCP server: two plain tools, served over stdio with the ``mcp`` SDK's server API.

The demo's runtime starts it as ``python -m tidings.demo.mcp_server`` and offers its tools as
``demo.changelog`` and ``demo.pid``. Offline and deterministic: it answers from what it holds.
"""

from __future__ import annotations

import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("demo")

CHANGELOGS = {
    "2.0": "12 changes, 2 of them breaking: the config file moved; Python 3.10 is no longer "
           "supported.",
}


@server.tool()
def changelog(version: str) -> str:
    """What changed in a release of the project, by version (e.g. "2.0")."""
    return f"{version}: {CHANGELOGS.get(version, 'no such release')}"


@server.tool()
def pid() -> int:
    """This server's process id."""
    return os.getpid()


def main() -> None:
    server.run()  # stdio


if __name__ == "__main__":
    main()
