"""The built-in ``spawn`` and ``send`` tools (A5, M16): delegate to child conversations.

``spawn`` opens a child conversation with a brief and returns at once; ``send`` asks a child
this conversation spawned again. Each reply the parent opened comes back exactly once as kernel
mail (origin ``child``) in a supplementary turn of the parent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tidings.errors import InvalidInputError
from tidings.mail.relay import ChildRelay
from tidings.tools.registry import Tool, ToolContext, ToolOutput

SPAWN_PARAMETERS: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "brief": {"type": "string", "description": "What the child conversation should do."},
        "title": {"type": "string", "description": "A short title for the child."},
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


def child_tools(relay: ChildRelay) -> tuple[Tool, Tool]:
    async def spawn(context: ToolContext, arguments: Mapping[str, Any]) -> ToolOutput:
        title = arguments.get("title", "")
        request = await relay.spawn(
            context.conversation_id, context.run_id, context.call_id, _text(arguments, "brief"),
            title=title if isinstance(title, str) else "",
        )
        return ToolOutput(
            f"spawned child conversation {request.child_conversation_id} (task "
            f"{request.task_key}); its reply will come back to you as a task_result",
            meta={"child_conversation_id": request.child_conversation_id,
                  "child_task_key": request.task_key},
        )

    async def send(context: ToolContext, arguments: Mapping[str, Any]) -> ToolOutput:
        request = await relay.send(
            context.conversation_id, _text(arguments, "conversation"), context.run_id,
            context.call_id, _text(arguments, "message"),
        )
        return ToolOutput(
            f"sent to {request.child_conversation_id} (task {request.task_key}); its reply "
            "will come back to you as a task_result",
            meta={"child_conversation_id": request.child_conversation_id,
                  "child_task_key": request.task_key},
        )

    return (
        Tool("spawn", "Delegate to a new child conversation with a brief.", spawn,
             parameters=SPAWN_PARAMETERS),
        Tool("send", "Ask a child conversation you spawned again.", send,
             parameters=SEND_PARAMETERS),
    )
