"""Calls of one MCP server's tools, each answered as a tool's output or a typed error.

A call is made through the link (:meth:`~tidings.mcp.link.Link.exchange`): an absent or broken
connection answers ``mcp_unavailable``, never a hang and never a success. The idle wait is
tidings' own: each sign of life (progress, a question asked during the call) starts it again.
A tool that only runs as a task on the core tasks wire is called as one and followed to its
end within the call; a call made in the background is not made here but started by
:mod:`tidings.mcp.task_requests` and followed by :mod:`tidings.mcp.tasks`.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping
from typing import Any

from mcp import Client, MCPError
from mcp_types import CallToolResult
from pydantic import ValidationError

from tidings.mcp import results, wire
from tidings.mcp.asking import Asker, Asking
from tidings.mcp.declaration import MCPServer
from tidings.mcp.link import Link
from tidings.mcp.offer import Offer
from tidings.mcp.reports import StatusReports
from tidings.mcp.tasks import ServerUnreachableError
from tidings.mcp.transport import RESULT_BOUND, SSE_EVENT_LIMIT
from tidings.tools.registry import ToolContext, ToolOutput


class Calls:
    """The calls made on one server's tools, with their feed reports (see
    :mod:`tidings.mcp.reports`) and what the server asks during them."""

    def __init__(self, server: MCPServer, link: Link, offer: Offer, reports: StatusReports,
                 asking: Asking) -> None:
        self.server = server
        self._link = link
        self._offer = offer
        self._reports = reports
        self.asking = asking

    async def call(self, tool: str, arguments: Mapping[str, Any], *,
                   conversation_id: str | None = None, ids: ToolContext | None = None
                   ) -> ToolOutput:
        """Call ``tool`` on the server; a broken or absent connection is a typed error.

        ``conversation_id``: the conversation calling, one concerned by what becomes of the
        server from now on (its feed is told when the server dies, or is back, and of the
        call's progress). A tool that only runs as a task is called as one and followed to
        its end."""
        conversation_id = conversation_id or (ids.conversation_id if ids else None)
        if conversation_id is not None:
            await self._reports.tell_skipped(conversation_id)
        output = await self._call(tool, arguments, ids)
        if conversation_id is not None:
            self._reports.called(conversation_id,
                                 failed=output.meta.get("error") == results.UNAVAILABLE)
        return output

    async def _call(self, tool: str, arguments: Mapping[str, Any],
                    ids: ToolContext | None) -> ToolOutput:
        alive = asyncio.Event()
        progress = self._reports.progress_of(ids, tool, alive)
        as_task = self._offer.task_support(tool) == "required" and self._link.wire == "core"
        asker = None if ids is None else Asker(
            ids.conversation_id, f"mcp:{self.server.name}:{ids.run_id}:{ids.call_id}",
            run_id=ids.run_id, alive=alive, sample=ids.sample)
        try:
            with self.asking.calling(asker):
                result = await self._call_once(tool, arguments, progress, alive, as_task)
        except Exception as exc:
            return failure(self.server.name, tool, exc)
        finally:
            await progress.close()
        return results.tool_output(self.server.name, tool, result, limit_bytes=RESULT_BOUND)

    async def _call_once(self, tool: str, arguments: Mapping[str, Any], progress: Any,
                         alive: asyncio.Event, as_task: bool) -> CallToolResult:
        timeout = self.server.timeout.total_seconds()
        if as_task:
            return await self._link.exchange(lambda client: self._task_to_the_end(
                client, tool, arguments, progress), timeout, alive)
        # The idle wait is tidings' own (each progress starts it again): the SDK's clock would
        # end a call that keeps reporting at ``timeout``.
        return await self._link.exchange(lambda client: client.call_tool(
            tool, dict(arguments), read_timeout_seconds=math.inf,
            progress_callback=progress), timeout, alive)

    async def _task_to_the_end(self, client: Client, tool: str, arguments: Mapping[str, Any],
                               progress: Any) -> CallToolResult:
        assert self._link.wire is not None
        timeout = self.server.timeout.total_seconds()
        started = await wire.call_as_task(client.session, tool, arguments,
                                          wire=self._link.wire, ttl=self.server.task_ttl,
                                          read_timeout_s=timeout, progress=progress)
        if isinstance(started, CallToolResult):
            return started
        # Followed without the SDK's clock: the idle wait around it (the link's exchange) bounds
        # it, and a person answering the task's question is not idle.
        return await wire.drive(client.session, started, self._link.wire, self.server.task_poll,
                                read_timeout_s=math.inf, answer=self.asking.answer_current)


def failure(name: str, tool: str, exc: Exception) -> ToolOutput:
    """A call's typed error (of server ``name``'s ``tool``) for what went wrong around it;
    what is no call's failure is raised again."""
    if isinstance(exc, ServerUnreachableError):
        return results.failure(results.UNAVAILABLE, name, tool, str(exc))
    if isinstance(exc, TimeoutError):
        return results.failure(results.TIMEOUT, name, tool, str(exc))
    if isinstance(exc, MCPError) and exc.error.message.startswith("SSE stream failed"):
        return results.failure(
            results.PROTOCOL, name, tool,
            f"the server's answer was larger than the {SSE_EVENT_LIMIT // 2**20} MiB an "
            f"answer may be, and was dropped whole ({exc.error.message})")
    if isinstance(exc, MCPError):
        return results.failure(results.PROTOCOL, name, tool, exc.error.message,
                               code=exc.code)
    if isinstance(exc, ValidationError):
        return results.failure(results.PROTOCOL, name, tool,
                               "the server's answer is not a valid result")
    if isinstance(exc, RuntimeError | TypeError | ValueError):  # an answer it cannot take
        return results.failure(results.PROTOCOL, name, tool, str(exc))
    raise exc


__all__ = ("Calls", "failure")
