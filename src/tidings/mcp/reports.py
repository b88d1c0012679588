"""What the feed says of an MCP server that died and came back (B4).

A server is not one conversation's, so its death is journalled where it matters: in the feed
of each conversation concerned -- one that called the server's tools in this process -- as
events the runtime writes (never an input, so no turn starts for them):

- ``mcp_call_failed`` (with the run's id): a call of a run failed because the server was not
  there or did not answer -- ``{run_public_id, call_id, tool, server, error, reason}``, written
  with the call's result, in the same commit;
- ``mcp_server_status`` (no run): the server's connection broke --
  ``{server, status: "disconnected", reason}`` -- in each conversation that had called it since
  it connected; and it is connected again -- ``{server, status: "connected", connections}`` --
  in each conversation told of the outage (by that event, or by a failed call meanwhile).

What a process saw is what it says: another process of a cluster runs its own connection to
the server, and reports its own. Whom an outage was told is kept in the database
(``mcp_outage_told``), written in the commit that told it: the next connection made to the
server -- by this process, or by a process started after this one stopped or was killed --
tells each of them ``connected`` once, in the commit that forgets it.

No SDK here: the turns import this module, and importing tidings stays quick.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol

from tidings.conversations.catalog import Conversations
from tidings.errors import TidingsError, UnknownConversationError
from tidings.records.transcript import ConversationTx
from tidings.store import Row, Tx

log = logging.getLogger("tidings.mcp")

UNAVAILABLE = "mcp_unavailable"
"""The server is not connected, or its connection broke while the call was made."""
TIMEOUT = "mcp_timeout"
"""The call did not answer within the server's call timeout."""
PROTOCOL = "mcp_error"
"""The server refused the call (an MCP protocol error: an unknown tool, bad arguments)."""

MCP_CALL_FAILED = "mcp_call_failed"
MCP_SERVER_STATUS = "mcp_server_status"
MCP_TOOL_SKIPPED = "mcp_tool_skipped"
MCP_PROGRESS = "mcp_progress"
PROGRESS_EVERY_S = 1.0
"""The feed hears of one call's progress at most this often (and its last word at the end)."""

SERVER_FAILURES = frozenset({UNAVAILABLE, TIMEOUT})
"""The failures that say the server is not there; a refused call (``mcp_error``) is the tool's
answer, like a result the server marks as an error."""

REMEMBERED = 1_024
"""Conversations a connection remembers as concerned (the most recent callers); also how many
of those told of an outage are read from the database at once."""


def record_call_failure(cx: ConversationTx, run_id: str, call_id: str, tool: str,
                        meta: Mapping[str, Any]) -> None:
    """Journal ``mcp_call_failed`` for a result that says its server was not there."""
    error = meta.get("error")
    server = meta.get("mcp_server")
    if error not in SERVER_FAILURES or not isinstance(server, str):
        return
    cx.record_event(MCP_CALL_FAILED, {
        "run_public_id": run_id, "call_id": call_id, "tool": tool, "server": server,
        "error": error, "reason": str(meta.get("reason", "")),
    }, run_id)
    if error == UNAVAILABLE:  # (a call that timed out found the server there)
        _told(cx, server)


def _told(cx: ConversationTx, server: str) -> None:
    """The conversation heard, in this commit, that ``server`` is not there."""
    cx.tx.execute("tell_mcp_outage", server=server, conversation_id=cx.conversation_id,
                  now_us=cx.now_us)


class StatusReports:
    """One server's concerned conversations, and the ``mcp_server_status`` events written to
    them when its connection breaks and when it is back.

    Who called the server since it connected is remembered here (the most recent
    :data:`REMEMBERED`); who was told of its outage is kept in the database, so that a process
    started after one stopped mid-outage tells them the server is back."""

    def __init__(self, server: str, conversations: Conversations | None) -> None:
        self.server = server
        self._conversations = conversations
        self._callers: OrderedDict[str, None] = OrderedDict()
        """Who called the server since it last connected, most recent last."""
        self.skipped: dict[str, str] = {}
        """The server's tools not offered at its last connection, and why."""
        self._heard_skipped: OrderedDict[tuple[str, str, str], None] = OrderedDict()
        """Who was told which tool was skipped, and why."""
        self._refused_told: OrderedDict[str, None] = OrderedDict()

    async def tell_skipped(self, conversation_id: str) -> None:
        """Tell a conversation that calls the server, once, which of its tools it is not
        offered and why (``mcp_tool_skipped``)."""
        for tool, why in self.skipped.items():
            key = (conversation_id, tool, why)
            if key in self._heard_skipped:
                continue
            self._heard_skipped[key] = None
            while len(self._heard_skipped) > REMEMBERED:
                self._heard_skipped.popitem(last=False)
            await self._write([conversation_id], {"server": self.server, "tool": tool,
                                                  "reason": why}, MCP_TOOL_SKIPPED)

    async def refused(self, status: int, reason: str) -> None:
        """The server refused tidings' credentials: each conversation concerned (a caller, or
        one told of the outage) is told once, with what to do (``mcp_server_status``
        ``unauthorized`` or ``forbidden``), and hears ``connected`` once it is let in."""
        data = {"server": self.server, "status": "unauthorized" if status == 401 else "forbidden",
                "http_status": status, "reason": reason}
        callers = list(self._callers)
        told = [c async for c in self._told() if c not in self._callers]
        for conversation_id in (*callers, *told):
            if conversation_id in self._refused_told:
                continue
            _remember(self._refused_told, conversation_id)
            await self._write([conversation_id], data, told_outage=True)

    def progress_of(self, ids: _CallIds | None, tool: str, alive: asyncio.Event) -> Progress:
        """The progress callback of one call: each notification is a sign of life (``alive``)
        and, throttled, an ``mcp_progress`` event in the calling conversation's feed."""
        return Progress(self, ids, tool, alive)

    def called(self, conversation_id: str, *, failed: bool) -> None:
        """A conversation called the server; ``failed``: it was not connected -- the turn's
        commit, which says so in the feed (:func:`record_call_failure`), keeps that it was
        told of the outage (a call that timed out found it there, and is a caller's)."""
        if not failed:
            _remember(self._callers, conversation_id)

    async def disconnected(self, reason: str) -> None:
        callers, self._callers = list(self._callers), OrderedDict()
        await self._write(callers, {"server": self.server, "status": "disconnected",
                                    "reason": reason}, told_outage=True)

    async def connected(self, connections: int) -> None:
        """Each conversation told of the outage, by any process, hears it is back: once, in
        the commit that forgets it was told."""
        self._refused_told.clear()
        data = {"server": self.server, "status": "connected", "connections": connections}
        async for conversation_id in self._told():
            await self._tell_back(conversation_id, data)

    async def _told(self) -> AsyncIterator[str]:
        """The conversations told of the outage, a page of :data:`REMEMBERED` at a time."""
        if self._conversations is None:
            return
        store, after = self._conversations.store, ""

        def page(tx: Tx) -> list[Row]:
            return tx.all("mcp_outage_told", server=self.server, after=after, limit=REMEMBERED)

        while True:
            rows = await store.read(page)
            for row in rows:
                yield row["conversation_id"]
            if len(rows) < REMEMBERED:
                return
            after = rows[-1]["conversation_id"]

    async def _tell_back(self, conversation_id: str, data: dict[str, Any]) -> None:
        assert self._conversations is not None

        def tell(cx: ConversationTx) -> None:
            # Another process that connected first may have told it already.
            if cx.tx.one("forget_mcp_outage_told", server=self.server,
                         conversation_id=conversation_id) is not None:
                cx.record_event(MCP_SERVER_STATUS, data)

        try:
            await self._conversations.change(conversation_id, tell)
        except UnknownConversationError:  # deleted since: no one to tell, nothing to keep
            await self._conversations.store.transact_query(
                "forget_mcp_outage_told", route=conversation_id, server=self.server,
                conversation_id=conversation_id)
        except Exception as exc:  # kept: told at the next connection
            self._failed(conversation_id, MCP_SERVER_STATUS, exc)

    async def _write(self, conversation_ids: list[str], data: dict[str, Any],
                     kind: str = MCP_SERVER_STATUS, run_id: str | None = None, *,
                     told_outage: bool = False) -> None:
        """Journal ``kind`` in each conversation; ``told_outage``: each is then one told of
        the outage, in the same commit."""
        if self._conversations is None:
            return
        for conversation_id in conversation_ids:
            def write(cx: ConversationTx) -> None:
                cx.record_event(kind, data, run_id)
                if told_outage:
                    _told(cx, self.server)

            try:
                await self._conversations.change(conversation_id, write)
            except Exception as exc:
                self._failed(conversation_id, kind, exc)

    def _failed(self, conversation_id: str, kind: str, exc: Exception) -> None:
        """A report never stops the connection from being made again: the log says it."""
        if isinstance(exc, TidingsError):  # gone, or the store cannot write now
            log.warning("MCP server %s: the feed of %s was not told %s: %s",
                        self.server, conversation_id, kind, exc.message)
        else:
            log.error("MCP server %s: the feed of %s was not told %s", self.server,
                      conversation_id, kind, exc_info=exc)


class _CallIds(Protocol):
    @property
    def conversation_id(self) -> str: ...
    @property
    def run_id(self) -> str: ...
    @property
    def call_id(self) -> str: ...


class Progress:
    """One call's progress notifications: signs of life, and ``mcp_progress`` events
    (``{call_id, tool, server, progress, total, message}``, on the call's run) at most every
    :data:`PROGRESS_EVERY_S`, the last one written when the call ends."""

    def __init__(self, reports: StatusReports, ids: _CallIds | None, tool: str,
                 alive: asyncio.Event) -> None:
        self._reports = reports
        self._ids = ids
        self._tool = tool
        self._alive = alive
        self._pending: dict[str, Any] | None = None
        self._last = 0.0
        self._writing: asyncio.Task[None] | None = None
        self.heard = 0

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.heard += 1
        self._alive.set()
        if self._ids is None:
            return
        self._pending = {"call_id": self._ids.call_id, "tool": f"{self._reports.server}."
                         f"{self._tool}", "server": self._reports.server, "progress": progress,
                         "total": total, "message": message}
        if self._writing is None and time.monotonic() - self._last >= PROGRESS_EVERY_S:
            self._writing = asyncio.get_running_loop().create_task(self._flush())

    async def _flush(self) -> None:
        try:
            while self._pending is not None and self._ids is not None:
                data, self._pending = self._pending, None
                self._last = time.monotonic()
                await self._reports._write([self._ids.conversation_id], data, MCP_PROGRESS,
                                           self._ids.run_id)
        finally:
            self._writing = None

    async def close(self) -> None:
        """The call ended: its last word reaches the feed."""
        if self._writing is not None:
            with contextlib.suppress(Exception):
                await self._writing
        if self._pending is not None:
            await self._flush()


def _remember(seen: OrderedDict[str, None], conversation_id: str) -> None:
    seen[conversation_id] = None
    seen.move_to_end(conversation_id)
    while len(seen) > REMEMBERED:
        seen.popitem(last=False)


__all__ = ("MCP_CALL_FAILED", "MCP_PROGRESS", "MCP_SERVER_STATUS", "MCP_TOOL_SKIPPED",
           "PROTOCOL", "TIMEOUT", "UNAVAILABLE", "Progress", "StatusReports",
           "record_call_failure")
