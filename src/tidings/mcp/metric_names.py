"""The names of the MCP metrics (importable without the SDK)."""

from __future__ import annotations

UP = "tidings_mcp_server_up"
RECONNECTS = "tidings_mcp_reconnects_total"
DISCONNECTS = "tidings_mcp_disconnects_total"

__all__ = ("DISCONNECTS", "RECONNECTS", "UP")
