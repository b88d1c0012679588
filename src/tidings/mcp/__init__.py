"""MCP servers' tools as tools of a runtime, through the official ``mcp`` SDK.

Declare servers with :class:`MCPServer` (a command started as a stdio subprocess, or a
streamable HTTP URL) and pass them to the runtime (``Runtime.open(..., mcp_servers=[...])``
or ``RuntimeConfig(mcp_servers=...)``). Each server's tools are registered as
``<server>.<tool>`` once it is connected, so a profile names them like any other tool. A server
that dies is reported in the feed of the conversations concerned (:mod:`tidings.mcp.reports`).
A server that runs tools as tasks runs a call made in the background as its task, and the
runtime follows it as one of its background tasks (:mod:`tidings.mcp.tasks`).

The SDK is imported only when a runtime declares a server: importing tidings stays quick.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from tidings.clock import Clock
from tidings.conversations.catalog import Conversations
from tidings.conversations.questions import Questions
from tidings.errors import InvalidInputError
from tidings.mcp.declaration import MCPOAuth, MCPServer
from tidings.mcp.metric_names import DISCONNECTS, RECONNECTS, UP
from tidings.records.results import MasterKey
from tidings.records.transcript import ConversationTx
from tidings.store import Store
from tidings.support.lifetime import Component
from tidings.support.metrics import Metrics
from tidings.tasks import journal
from tidings.tasks.service import BackgroundTasks
from tidings.tools.registry import ToolRegistry

if TYPE_CHECKING:
    from tidings.mcp.connection import MCPConnection
    from tidings.mcp.tasks import MCPTasks


class MCPServers:
    """Every declared server's connection; each is a component of the runtime's lifetime."""

    def __init__(self, servers: Iterable[MCPServer], registry: ToolRegistry,
                 metrics: Metrics, tasks: BackgroundTasks | None = None,
                 conversations: Conversations | None = None,
                 questions: Questions | None = None, store: Store | None = None,
                 master_key: Callable[[], MasterKey | None] = lambda: None,
                 clock: Clock | None = None) -> None:
        """``store`` and ``master_key`` keep OAuth servers' tokens, sealed (none: in memory)."""
        self.connections: dict[str, MCPConnection] = {}
        self.tasks: MCPTasks | None = None
        """Follows the servers' tasks (with the runtime's background tasks)."""
        servers = tuple(servers)
        if not servers:
            return
        from tidings.mcp.connection import MCPConnection  # the SDK, once it is needed
        from tidings.mcp.oauth import SealedTokens
        from tidings.mcp.tasks import MCPTasks

        if tasks is not None:  # it follows tasks on the connections made below
            self.tasks = MCPTasks(tasks, self.connections)
        for server in servers:
            if server.name in self.connections:
                raise InvalidInputError(f"two MCP servers are named {server.name!r}")
            self.connections[server.name] = MCPConnection(
                server, registry, metrics, conversations=conversations, questions=questions,
                tokens=(None if server.oauth is None else
                        SealedTokens(server, store, master_key, clock)),
                tasks=self.tasks, clock=clock)

    def components(self) -> tuple[Component, ...]:
        """What has a lifetime: the task follower (stopped first), then each connection."""
        return (*(() if self.tasks is None else (self.tasks,)), *self.connections.values())

    def cancel_run(self, cx: ConversationTx, run_id: str) -> None:
        """A stopped run's tasks notify nothing more -- and its servers' tasks are cancelled
        there (see :meth:`~tidings.mcp.tasks.MCPTasks.cancel_run`)."""
        if self.tasks is None:
            journal.cancel_run(cx, run_id)
        else:
            self.tasks.cancel_run(cx, run_id)

    def __getitem__(self, name: str) -> MCPConnection:
        return self.connections[name]

    async def started(self) -> None:
        """Wait until every server's first connection attempt ended (it is bounded by the
        server's connect timeout): its tools are registered before the first turn, when it
        could be reached."""
        within = max((2 * c.server.connect_timeout.total_seconds()
                      for c in self.connections.values()), default=0.0)
        waits = [asyncio.ensure_future(c.tried()) for c in self.connections.values()]
        if waits:
            _, pending = await asyncio.wait(waits, timeout=within)
            for wait in pending:
                wait.cancel()


__all__ = ("DISCONNECTS", "RECONNECTS", "UP", "MCPOAuth", "MCPServer", "MCPServers")
