"""One MCP server's connection: a long-lived component of the runtime, a
:class:`~tidings.support.lifetime.Loop` whose work is the connection.

Its work connects (starting the subprocess, or opening the HTTP session), lists the server's
tools and registers each as ``<server>.<tool>``, then holds the connection until it breaks --
the subprocess exits, the transport closes, a call finds it broken. A broken connection is
logged, counted, reported in the feed of the conversations concerned (see
:mod:`tidings.mcp.reports`) and tried again after a capped, jittered backoff, for as long as
the runtime runs; it is never dropped silently. Meanwhile its tools answer a typed
``mcp_unavailable`` error, and a call in flight when the connection breaks answers that error
too: never a hang, never a success. ``shutdown()`` closes the session and ends the subprocess
(a shutdown is not reported as a death).

When the server runs tools as tasks (:mod:`tidings.mcp.wire`), each tool that can run as one
also offers a ``background`` argument; a call made in the background (that argument, or the
profile's ``background`` list) is made as a task and followed by :mod:`tidings.mcp.tasks`.

This module holds the work (connect, hold, reconnect) and is what the rest of tidings sees of a
server; the parts it is made of each have their own module, one way down:
:mod:`~tidings.mcp.calls` (a tool's call) and :mod:`~tidings.mcp.task_requests` (the requests
that start and follow a task), over :mod:`~tidings.mcp.offer` (the listing, and the tools
registered), over :mod:`~tidings.mcp.link` (the live client, its loss, one request raced
against both), over :mod:`~tidings.mcp.transport` (stdio or HTTP, its end watched).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Mapping
from typing import Any

from tidings.clock import Clock, SystemClock
from tidings.conversations.catalog import Conversations
from tidings.conversations.questions import Questions
from tidings.mcp import oauth
from tidings.mcp.asking import Asker, Asking
from tidings.mcp.calls import Calls
from tidings.mcp.declaration import MCPServer
from tidings.mcp.link import Link
from tidings.mcp.metric_names import DISCONNECTS, RECONNECTS, UP
from tidings.mcp.offer import Offer, list_tools
from tidings.mcp.reports import StatusReports
from tidings.mcp.task_requests import TaskRequests
from tidings.mcp.tasks import MCPTasks, RemoteStatus
from tidings.mcp.transport import describe
from tidings.mcp.wire import TaskState, Wire, wire_of
from tidings.support.lifetime import Loop
from tidings.support.metrics import Metrics
from tidings.support.policy import backoff
from tidings.tools.registry import ToolContext, ToolOutput, ToolRegistry

log = logging.getLogger("tidings.mcp")


class MCPConnection(Loop):
    """The connection to one declared server, and the tools it registered.

    ``conversations``: where the feed reports of its deaths and returns are written (none: not
    written, as for a connection made outside a runtime)."""

    def __init__(self, server: MCPServer, registry: ToolRegistry, metrics: Metrics,
                 *, rng: random.Random | None = None,
                 conversations: Conversations | None = None,
                 questions: Questions | None = None,
                 tokens: oauth.SealedTokens | None = None,
                 tasks: MCPTasks | None = None, clock: Clock | None = None) -> None:
        super().__init__(f"tidings-mcp-{server.name}")
        self._clock: Clock = clock or SystemClock()
        self.asking = Asking(server, questions)
        """What the server asks during calls and for its tasks (elicitation, sampling)."""
        self.server = server
        self._metrics = metrics
        self._reports = StatusReports(server.name, conversations)
        self._rng = rng or random.Random()
        self._link = Link(server, self.asking, tokens, self._status)
        self._offer = Offer(server, registry, self._reports, self._link)
        self._calls = Calls(server, self._link, self._offer, self._reports, self.asking)
        self._requests = TaskRequests(server, self._link, self.asking)
        self._tried = asyncio.Event()
        self._up = asyncio.Event()
        self.tasks = tasks
        """Follows the tasks this server runs for background calls (none: calls are never
        made as tasks)."""
        self.connections = 0
        """How many times this connection was made (1 after the first, +1 each reconnect)."""
        self._set_up(False)

    @property
    def up(self) -> bool:
        return self._link.up

    @property
    def wire(self) -> Wire | None:
        """How the connected server runs tools as tasks, if it does."""
        return self._link.wire

    @property
    def skipped(self) -> dict[str, str]:
        """Tools the server listed that are not offered, and why."""
        return self._offer.skipped

    async def tried(self) -> None:
        """Return once the first connection attempt ended, connected or not."""
        await self._tried.wait()

    async def until_up(self) -> None:
        """Return once the server is connected."""
        await self._up.wait()

    # -- the component's work -----------------------------------------------------------------

    async def serve(self) -> None:
        link = self._link
        failures = 0
        while True:
            lost = link.lost = asyncio.Event()
            refused_before = link.refused
            try:
                async with link.open() as client:
                    async with asyncio.timeout(self.server.connect_timeout.total_seconds()):
                        tools, malformed = await list_tools(client)
                    link.wire = wire_of(client)
                    offered = self._offer.register(
                        tools, malformed,
                        lambda tool, offers: _handler(self, tool, offers_background=offers))
                    link.client, failures, link.refused = client, 0, None
                    self.connections += 1
                    self._set_up(True)
                    self._up.set()
                    if self.connections > 1:
                        self._metrics.count(RECONNECTS, "MCP server connections made again "
                                            "after one broke, by server.",
                                            labels={"server": self.server.name})
                    log.info("MCP server %s connected (%s%s): %d tools%s", self.server.name,
                             self.server.transport,
                             f", {link.wire} tasks" if link.wire else "", offered,
                             f", {len(self.skipped)} skipped" if self.skipped else "")
                    self._tried.set()
                    await self._reports.connected(self.connections)
                    await lost.wait()
            except Exception as exc:  # any failure of a connection is retried
                if not lost.is_set():
                    link.reason = describe(exc)
            finally:
                was_up, link.client = link.client is not None, None
                self._up.clear()
                lost.set()
                self._set_up(False)
            self._tried.set()
            failures += 1
            if link.refused is not None:
                # Refused: said once, with what to do; asked again only at the cap, quietly.
                if refused_before != link.refused:
                    link.reason = oauth.refusal(self.server, link.refused, link.refused_why)
                    log.error("MCP server %s refused tidings: %s", self.server.name,
                              link.reason)
                    await self._reports.refused(link.refused, link.reason)
                await self._clock.sleep(self.server.reconnect_cap.total_seconds())
                continue
            delay = backoff(failures, self._rng, base=self.server.reconnect_base,
                            cap=self.server.reconnect_cap)
            log.warning("MCP server %s %s: %s; connecting again in %.2f s", self.server.name,
                        "disconnected" if was_up else "could not be connected", link.reason,
                        delay.total_seconds())
            if was_up:
                self._metrics.count(DISCONNECTS, "MCP server connections that broke, by server.",
                                    labels={"server": self.server.name})
                await self._reports.disconnected(link.reason)
            await self._clock.sleep(delay.total_seconds())

    def _set_up(self, up: bool) -> None:
        self._metrics.set_gauge(UP, "1 while the MCP server is connected, by server.",
                                1.0 if up else 0.0, {"server": self.server.name})

    def _status(self, mcp_task_id: str) -> None:
        if self.tasks is not None:
            self.tasks.wake(self.server.name, mcp_task_id)

    # -- the tools: what the runtime and the task follower ask of a server --------------------

    def task_support(self, tool: str) -> str:
        """``forbidden``, ``optional`` or ``required``: how ``tool`` runs as a task here."""
        return self._offer.task_support(tool)

    def runs_as_task(self, tool: str) -> bool:
        """Whether a call of ``tool`` can be made as a task (the server runs tools as tasks,
        and does not list this one as forbidden to)."""
        return self.task_support(tool) != "forbidden"

    async def call(self, tool: str, arguments: Mapping[str, Any], *,
                   conversation_id: str | None = None, ids: ToolContext | None = None
                   ) -> ToolOutput:
        """Call ``tool`` on the server; a broken or absent connection is a typed error (see
        :meth:`~tidings.mcp.calls.Calls.call`)."""
        return await self._calls.call(tool, arguments, conversation_id=conversation_id,
                                      ids=ids)

    async def start_task(self, tool: str, arguments: Mapping[str, Any]) -> str | ToolOutput:
        """Call ``tool`` as a task: the server's task id, or the call's result or typed error
        (see :meth:`~tidings.mcp.task_requests.TaskRequests.start_task`)."""
        return await self._requests.start_task(tool, arguments)

    async def task_status(self, mcp_task_id: str) -> RemoteStatus:
        """``tasks/get``: how the server's task goes."""
        return await self._requests.task_status(mcp_task_id)

    async def task_output(self, state: TaskState, tool: str) -> ToolOutput:
        """The result of the call an ended task ran, read as a call's result is."""
        return await self._requests.task_output(state, tool)

    async def answer_task(self, state: TaskState, asker: Asker) -> None:
        """Answer what a task waiting for input asks."""
        await self._requests.answer_task(state, asker)

    async def cancel_task(self, mcp_task_id: str) -> None:
        """``tasks/cancel``: ask the server to stop its task."""
        await self._requests.cancel_task(mcp_task_id)


def _handler(connection: MCPConnection, tool: str, *, offers_background: bool) -> Any:
    async def handle(context: ToolContext, arguments: Mapping[str, Any]) -> ToolOutput:
        arguments = dict(arguments)
        asked = bool(arguments.pop("background", False)) if offers_background else False
        tasks = connection.tasks
        support = connection.task_support(tool)
        wanted = asked or context.background or (
            support == "required" and connection.wire == "extension")
        if wanted and tasks is not None and support != "forbidden":
            return await tasks.start(context, connection, tool, arguments)
        return await connection.call(tool, arguments, ids=context)
    return handle


__all__ = ("MCPConnection",)
