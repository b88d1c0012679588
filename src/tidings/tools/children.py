"""The built-in ``spawn``, ``send`` and ``cancel`` tools (A5, M16): delegate to child conversations.

``spawn`` opens a child conversation with a brief and returns at once; ``send`` asks a child
this conversation spawned again. Each reply the parent opened comes back exactly once as kernel
mail (origin ``child``) in a supplementary turn of the parent -- except the first report of a
turn-owned spawn (``lifetime: "turn"``, or a ``wait_s``), which the spawning turn receives
before its reply is final: in the spawn's own result when it comes within the wait, else in a
synthesis round (M16).

``spawn`` with ``agent`` (when the runtime declares remote agents) delegates to a remote A2A
agent instead (P5): the child is the same kind of child -- its reply comes from the remote
task rather than a local conversation -- and ``send`` to it continues the remote exchange
(answering the agent's question when it asked one).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from tidings.errors import InvalidInputError
from tidings.mail.child_requests import Cancelled, ChildRequest
from tidings.mail.relay import ChildRelay, render
from tidings.tools.registry import Tool, ToolContext, ToolOutput


class RemoteChildren(Protocol):
    """The remote agents a spawn may delegate to (P5; :mod:`tidings.agents` gives them)."""

    def names(self) -> tuple[str, ...]: ...

    async def spawn(self, context: ToolContext, agent: str, brief: str, *, title: str = "",
                    turn_owned: bool = False) -> ChildRequest: ...

    async def send(self, context: ToolContext, child_id: str, message: str
                   ) -> ChildRequest | None: ...

MAX_SPAWN_WAIT_S = 60.0

SPAWN_PARAMETERS: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "brief": {"type": "string", "description": "What the child conversation should do."},
        "title": {"type": "string", "description": "A short title for the child."},
        "lifetime": {
            "type": "string", "enum": ["conversation", "turn"],
            "description": "turn: its first report is given to you before your reply is "
                           "final; conversation (default): it comes back later as mail.",
        },
        "wait_s": {
            "type": "number", "minimum": 0, "maximum": 60,
            "description": "Wait up to this long for the first report (a turn-owned spawn).",
        },
    },
    "required": ["brief"],
}
SEND_PARAMETERS: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "conversation": {"type": "string", "description": "A child this conversation spawned."},
        "message": {"type": "string", "description": "What to ask it."},
    },
    "required": ["conversation", "message"],
}


def _text(arguments: Mapping[str, Any], name: str) -> str:
    value = arguments.get(name)
    if not isinstance(value, str) or not value.strip():
        raise InvalidInputError(f"{name} must be a non-empty string")
    return value


CANCEL_PARAMETERS: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "task_key": {"type": "string", "description": "The task key of a spawn or a send."},
    },
    "required": ["task_key"],
}

CancelChild = Callable[[str, str], Awaitable[list[Cancelled]]]
"""Cancels a request a parent opened, in cascade: ``(parent_id, task_key) -> cancelled``."""


def spawn_parameters(agents: tuple[str, ...]) -> Mapping[str, Any]:
    """``spawn``'s parameters: with ``agent`` when remote agents are declared."""
    if not agents:
        return SPAWN_PARAMETERS
    agent = {"type": "string", "enum": list(agents),
             "description": "Delegate to this remote agent instead of a new local "
                            "conversation."}
    return {**SPAWN_PARAMETERS,
            "properties": {**SPAWN_PARAMETERS["properties"], "agent": agent}}


def child_tools(relay: ChildRelay, cancel_child: CancelChild,
                remote: RemoteChildren | None = None) -> tuple[Tool, Tool, Tool]:
    async def _owned(request: ChildRequest, wait_s: float) -> ToolOutput:
        """A turn-owned spawn: its first report is shown now if it comes within the wait (and
        is consumed with this result), else the turn receives it before its reply is final.
        A wait that expires does not release that obligation (M16)."""
        meta = {"child_conversation_id": request.child_conversation_id,
                "child_task_key": request.task_key, "task_key": request.task_key,
                "turn_child_request": request.request_id}
        if wait_s > 0 and await relay.await_replies([request.request_id], wait_s):
            replied = await relay.reply_of(request.request_id)
            if replied is not None and replied.state == "replied":
                return ToolOutput(render(replied),
                                  meta={**meta, "consume_child_request": request.request_id})
        return ToolOutput(
            f"spawned child conversation {request.child_conversation_id} (task "
            f"{request.task_key}); its first report will be given to you before your reply "
            "is final", meta=meta,
        )

    async def spawn(context: ToolContext, arguments: Mapping[str, Any]) -> ToolOutput:
        title = arguments.get("title", "")
        brief = _text(arguments, "brief")
        lifetime = arguments.get("lifetime", "conversation")
        wait_s = arguments.get("wait_s", 0)
        if lifetime not in ("conversation", "turn"):
            raise InvalidInputError("lifetime must be 'conversation' or 'turn'")
        if isinstance(wait_s, bool) or not isinstance(wait_s, int | float) \
                or not 0 <= wait_s <= MAX_SPAWN_WAIT_S:
            raise InvalidInputError(f"wait_s must be between 0 and {MAX_SPAWN_WAIT_S:.0f}")
        turn_owned = lifetime == "turn" or wait_s > 0
        agent = arguments.get("agent")
        if agent is not None:
            if remote is None or agent not in remote.names():
                raise InvalidInputError(f"no remote agent is named {agent!r}")
            request = await remote.spawn(
                context, agent, brief, title=title if isinstance(title, str) else "",
                turn_owned=turn_owned)
        else:
            request = await relay.spawn(
                context.conversation_id, context.run_id, context.call_id, brief,
                title=title if isinstance(title, str) else "", turn_owned=turn_owned,
            )
        if turn_owned:
            return await _owned(request, float(wait_s))
        return ToolOutput(
            f"spawned child conversation {request.child_conversation_id} (task "
            f"{request.task_key}); its reply will come back to you as a task_result",
            meta={"child_conversation_id": request.child_conversation_id,
                  "child_task_key": request.task_key},
        )

    async def send(context: ToolContext, arguments: Mapping[str, Any]) -> ToolOutput:
        child, message = _text(arguments, "conversation"), _text(arguments, "message")
        request = None if remote is None else await remote.send(context, child, message)
        if request is None:
            request = await relay.send(context.conversation_id, child, context.run_id,
                                       context.call_id, message)
        return ToolOutput(
            f"sent to {request.child_conversation_id} (task {request.task_key}); its reply "
            "will come back to you as a task_result",
            meta={"child_conversation_id": request.child_conversation_id,
                  "child_task_key": request.task_key},
        )

    async def cancel(context: ToolContext, arguments: Mapping[str, Any]) -> ToolOutput:
        """The canceller is told what it cancelled, down the tree (M16)."""
        cancelled = await cancel_child(context.conversation_id, _text(arguments, "task_key"))
        return ToolOutput(json.dumps({
            "cancelled": [{"task_key": c.task_key, "conversation": c.child_conversation_id}
                          for c in cancelled],
            "note": "nothing to cancel: its reply was received already" if not cancelled
            else "these replies are owed to no one now",
        }))

    return (
        Tool("spawn", "Delegate to a new child conversation with a brief"
             + (" (or to a remote agent)." if remote is not None and remote.names() else "."),
             spawn, parameters=spawn_parameters(() if remote is None else remote.names())),
        Tool("send", "Ask a child conversation you spawned again.", send,
             parameters=SEND_PARAMETERS),
        Tool("cancel", "Cancel a spawn or send whose reply you no longer want (and whatever "
             "that child delegated in turn).", cancel, parameters=CANCEL_PARAMETERS),
    )
