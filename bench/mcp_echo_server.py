"""The MCP server bench/mcp_overhead.py calls: one ``echo`` tool, over stdio."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

server = MCPServer("bench")


@server.tool()
def echo(text: str) -> str:
    """Returns its text."""
    return text


if __name__ == "__main__":
    server.run()
