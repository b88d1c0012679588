"""The tools one MCP server offers: its listing read tool by tool, and each tool it can offer
registered as ``<server>.<tool>``.

A tool that cannot be offered -- a malformed listing, a name tidings cannot offer, one that
only runs as a task on a server that runs none -- is skipped with a warning (and told to the
conversations that call the server, see :mod:`tidings.mcp.reports`): never the whole server.
A tool registered at an earlier connection stays registered; while the server is not
connected, it answers a typed ``mcp_unavailable`` error (:mod:`tidings.mcp.calls`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from mcp import Client
from mcp_types import ListToolsResult
from mcp_types import Tool as MCPTool
from pydantic import ValidationError

from tidings.mcp import wire
from tidings.mcp.declaration import MCPServer
from tidings.mcp.link import Link
from tidings.mcp.reports import StatusReports
from tidings.tools.registry import Tool, ToolHandler, ToolRegistry

log = logging.getLogger("tidings.mcp")

_LIST_PAGES = 100  # a server whose listing never ends cannot hold the start forever
BACKGROUND = {
    "type": "boolean",
    "description": ("Run it as a background task on its server: returns a task_key at once, "
                    "and you are told when it ends."),
}
"""The argument each tool of a server that runs tools as tasks offers (unless it has its own)."""


class Offer:
    """What one server offers: its tools' names in the registry, how each runs as a task, and
    the tools it listed that are not offered (``skipped``, with why)."""

    def __init__(self, server: MCPServer, registry: ToolRegistry, reports: StatusReports,
                 link: Link) -> None:
        self.server = server
        self._registry = registry
        self._reports = reports
        self._link = link
        self._task_support: dict[str, str] = {}
        self.skipped: dict[str, str] = {}
        """Tools the server listed that are not offered, and why."""

    def register(self, tools: list[MCPTool], malformed: dict[str, str],
                 handler: Callable[[str, bool], ToolHandler]) -> int:
        """Register the server's tools; how many it offers. A tool that cannot be offered (a
        malformed listing, a name tidings cannot offer, one that only runs as a task on a
        server that runs none) is skipped with a warning: never the whole server."""
        skipped = dict(malformed)
        offered = 0
        for tool in tools:
            if tool.input_schema.get("type") != "object":  # no model takes such parameters
                skipped[tool.name] = (f"its listing is not valid: inputSchema: the type is "
                                      f"{tool.input_schema.get('type')!r}, not 'object'")
                continue
            support = wire.task_support(tool, self._link.wire)
            if support == "required" and self._link.wire is None:
                skipped[tool.name] = "it only runs as a task, and the server runs no tasks"
                continue
            self._task_support[tool.name] = support
            full = f"{self.server.name}.{tool.name}"
            if full in self._registry:
                offered += 1
                continue  # registered at an earlier connection (or a host's own tool wins)
            parameters = dict(tool.input_schema)
            properties = parameters.get("properties")
            offers = support == "optional" and "background" not in (properties or {})
            if offers:
                parameters["properties"] = {**(properties or {}), "background": BACKGROUND}
            try:
                self._registry.register(Tool(
                    full, tool.description or tool.title or tool.name,
                    handler(tool.name, offers), parameters,
                    read_only=bool(tool.annotations and tool.annotations.read_only_hint),
                ))
            except Exception as exc:  # a name tidings cannot offer is skipped
                skipped[tool.name] = str(exc)
                continue
            offered += 1
        for name, why in skipped.items():
            if self.skipped.get(name) != why:
                log.warning("MCP server %s: tool %r is not offered: %s", self.server.name,
                            name, why)
        self.skipped = skipped
        self._reports.skipped = dict(skipped)
        return offered

    def task_support(self, tool: str) -> str:
        """``forbidden``, ``optional`` or ``required``: how ``tool`` runs as a task here."""
        if not self._link.up:
            return "forbidden"
        return self._task_support.get(tool, "forbidden")


async def list_tools(client: Client) -> tuple[list[MCPTool], dict[str, str]]:
    """The server's tools, each read on its own: one malformed tool is set apart (with why),
    never the whole listing."""
    tools: list[MCPTool] = []
    malformed: dict[str, str] = {}
    cursor: str | None = None
    for _ in range(_LIST_PAGES):
        page = await _raw_list(client, cursor)
        valid: list[MCPTool] = []
        for raw in page.get("tools") or []:
            try:
                valid.append(MCPTool.model_validate(raw, by_name=False))
            except ValidationError as exc:
                name = raw.get("name") if isinstance(raw, Mapping) else None
                first = exc.errors()[0]
                where = ".".join(str(part) for part in first["loc"])
                malformed[str(name or "?")] = f"its listing is not valid: {where}: {first['msg']}"
        # The session learns the sound tools as its own listing would teach it (their output
        # schemas, their headers): else its first call lists them again, whole, and one
        # malformed tool fails every call.
        absorbed = client.session._absorb_tool_listing(ListToolsResult(tools=list(valid)),
                                                       complete=False).tools
        for tool in valid:
            if tool not in absorbed:
                malformed[tool.name] = "its listing is not valid: an invalid x-mcp-header"
        tools.extend(absorbed)
        cursor = page.get("nextCursor")
        if not isinstance(cursor, str):
            break
    return tools, malformed


async def _raw_list(client: Client, cursor: str | None) -> dict[str, Any]:
    """One page of ``tools/list``, as the server sent it (the SDK's own request validates the
    whole page as one, so one malformed tool would fail every tool)."""
    return await wire.raw_request(
        client.session, {"method": "tools/list", "params": {"cursor": cursor} if cursor else {}},
        read_timeout_s=client.session._session_read_timeout_seconds)


__all__ = ("BACKGROUND", "Offer", "list_tools")
