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
the server, and reports its own; a process that ends forgets whom it told.

No SDK here: the turns import this module, and importing tidings stays quick.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from tidings.conversations import Conversations
from tidings.errors import TidingsError
from tidings.transcript import ConversationTx

log = logging.getLogger("tidings.mcp")

UNAVAILABLE = "mcp_unavailable"
"""The server is not connected, or its connection broke while the call was made."""
TIMEOUT = "mcp_timeout"
"""The call did not answer within the server's call timeout."""
PROTOCOL = "mcp_error"
"""The server refused the call (an MCP protocol error: an unknown tool, bad arguments)."""

MCP_CALL_FAILED = "mcp_call_failed"
MCP_SERVER_STATUS = "mcp_server_status"

SERVER_FAILURES = frozenset({UNAVAILABLE, TIMEOUT})
"""The failures that say the server is not there; a refused call (``mcp_error``) is the tool's
answer, like a result the server marks as an error."""

REMEMBERED = 1_024
"""Conversations a connection remembers as concerned (the most recent callers)."""


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


class StatusReports:
    """One server's concerned conversations, and the ``mcp_server_status`` events written to
    them when its connection breaks and when it is back."""

    def __init__(self, server: str, conversations: Conversations | None) -> None:
        self.server = server
        self._conversations = conversations
        self._callers: OrderedDict[str, None] = OrderedDict()
        """Who called the server since it last connected, most recent last."""
        self._told: OrderedDict[str, None] = OrderedDict()
        """Who knows of the current outage: told ``disconnected``, or a call failed."""

    def called(self, conversation_id: str, *, failed: bool) -> None:
        """A conversation called the server; ``failed``: it was not connected (a call that
        timed out found it there, and is a caller's)."""
        _remember(self._told if failed else self._callers, conversation_id)

    async def disconnected(self, reason: str) -> None:
        callers, self._callers = list(self._callers), OrderedDict()
        for conversation_id in callers:
            _remember(self._told, conversation_id)
        await self._write(callers, {"server": self.server, "status": "disconnected",
                                    "reason": reason})

    async def connected(self, connections: int) -> None:
        told, self._told = list(self._told), OrderedDict()
        await self._write(told, {"server": self.server, "status": "connected",
                                 "connections": connections})

    async def _write(self, conversation_ids: list[str], data: dict[str, Any]) -> None:
        if self._conversations is None:
            return
        for conversation_id in conversation_ids:
            try:
                await self._conversations.change(conversation_id, lambda cx: cx.record_event(
                    MCP_SERVER_STATUS, data))
            except TidingsError as exc:  # gone, or the store cannot write now: the log says it
                log.warning("MCP server %s: the feed of %s was not told it is %s: %s",
                            self.server, conversation_id, data["status"], exc.message)
            except Exception:  # a report never stops the connection from being made again
                log.exception("MCP server %s: the feed of %s was not told it is %s",
                              self.server, conversation_id, data["status"])


def _remember(seen: OrderedDict[str, None], conversation_id: str) -> None:
    seen[conversation_id] = None
    seen.move_to_end(conversation_id)
    while len(seen) > REMEMBERED:
        seen.popitem(last=False)


__all__ = ("MCP_CALL_FAILED", "MCP_SERVER_STATUS", "PROTOCOL", "TIMEOUT", "UNAVAILABLE",
           "StatusReports", "record_call_failure")
