"""The live link to one MCP server: the SDK's client while connected, and how it is lost.

A link is opened by its connection's work (:mod:`tidings.mcp.connection`) and held until it
is lost: the transport says the server's stream ended (:mod:`tidings.mcp.transport`), the
server refused tidings, or a request found the transport broken. Every request goes through
:meth:`Link.exchange`, which races it against the loss and an idle wait: a request in flight
when the link is lost answers :class:`~tidings.mcp.tasks.ServerUnreachableError`, never hangs
and never succeeds.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from mcp import Client, MCPError
from mcp_types import CONNECTION_CLOSED

from tidings.mcp import oauth, wire
from tidings.mcp.asking import Asking
from tidings.mcp.declaration import MCPServer
from tidings.mcp.tasks import ServerUnreachableError
from tidings.mcp.transport import client_info, describe, watched

T = TypeVar("T")


class Link:
    """One server's SDK client while connected (``client``; none between connections), the
    event set when it is lost and why, and how the connected server runs tools as tasks.

    ``status``: told the id of each task the server says changed (the tasks extension's
    notifications), to wake the task's follower."""

    def __init__(self, server: MCPServer, asking: Asking, tokens: oauth.SealedTokens | None,
                 status: Callable[[str], None]) -> None:
        self.server = server
        self._asking = asking
        self._tokens = tokens  # an OAuth server's tokens (none: it is sent no OAuth)
        self._status = status
        self.client: Client | None = None
        self.lost = asyncio.Event()
        self.reason = "not connected yet"
        self.refused: int | None = None
        """The HTTP status (401, 403) the server refused tidings with, while it does."""
        self.refused_why = ""
        self.wire: wire.Wire | None = None
        """How the connected server runs tools as tasks, if it does."""

    @property
    def up(self) -> bool:
        return self.client is not None

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[Client]:
        """The SDK's client, connected (within the connect timeout) until the block ends."""
        asking = self._asking
        client = Client(watched(self.server, self.lose, self.refuse, self._tokens),
                        cache=None,
                        client_info=client_info(),
                        read_timeout_seconds=self.server.timeout.total_seconds(),
                        elicitation_callback=asking.elicit,
                        sampling_callback=(None if self.server.sampling == "refuse"
                                           else asking.sample),
                        list_roots_callback=asking.roots if self.server.roots else None,
                        extensions=[wire.TasksExtension(self._status, self.server.task_poll,
                                                        asking.answer_current)])
        async with contextlib.AsyncExitStack() as stack:
            async with asyncio.timeout(self.server.connect_timeout.total_seconds()):
                await stack.enter_async_context(client)
            yield client

    def lose(self, reason: str) -> None:
        """Mark the link lost (once: the first reason stays)."""
        if not self.lost.is_set():
            self.reason = reason
            self.lost.set()

    def refuse(self, status: int, why: str = "") -> None:
        """Mark the link lost because the server refused tidings (HTTP ``status``)."""
        self.refused, self.refused_why = status, why
        self.lose(oauth.refusal(self.server, status, why))

    async def exchange(self, send: Callable[[Client], Awaitable[T]], within_s: float,
                       alive: asyncio.Event | None = None) -> T:
        """Send one request; its answer, or an error -- :class:`ServerUnreachableError` when
        not connected or when the connection broke meanwhile (it is then tried again),
        :class:`TimeoutError` past ``within_s`` seconds without an answer (or, with
        ``alive``, without a sign of life: each one starts the wait again), the server's
        ``MCPError``, or a ``ValidationError`` for an answer that is not one."""
        client, lost = self.client, self.lost
        if client is None:
            raise ServerUnreachableError(self.reason)
        call = asyncio.ensure_future(send(client))
        broke = asyncio.ensure_future(lost.wait())
        waits: set[asyncio.Future[Any]] = {call, broke}
        try:
            while True:
                lively = None if alive is None else asyncio.ensure_future(alive.wait())
                try:
                    done, _ = await asyncio.wait(
                        waits if lively is None else {*waits, lively}, timeout=within_s,
                        return_when=asyncio.FIRST_COMPLETED)
                finally:
                    if lively is not None:
                        lively.cancel()
                if alive is not None and alive.is_set() and not done & waits:
                    alive.clear()  # a sign of life: the idle wait starts again
                    continue
                break
        finally:
            broke.cancel()
            if not call.done():
                call.cancel()
                with contextlib.suppress(BaseException):
                    await call
        if call not in done:
            if lost.is_set():
                raise ServerUnreachableError(
                    f"the connection broke during the call: {self.reason}")
            raise TimeoutError(f"no answer within {within_s:g} s")
        try:
            return call.result()
        except MCPError as exc:
            if exc.code != CONNECTION_CLOSED:
                raise
            if exc.error.message.startswith("SSE stream failed"):
                # One answer the transport would not take (too large): this call's failure,
                # not the connection's.
                raise
            self.lose("the connection closed")
        except (ValueError, TypeError, RuntimeError):
            raise  # an answer this client cannot take (ValidationError too): the call's failure
        except Exception as exc:  # a transport failure: the connection is gone
            self.lose(describe(exc))
        raise ServerUnreachableError(f"the connection broke during the call: {self.reason}")


__all__ = ("Link",)
