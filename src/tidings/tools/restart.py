"""The built-in ``restart`` tool (L2): a profile that lists it may ask for a restart of the
runtime. The restart is committed as accepted before the tool returns, and the model is told
just that -- accepted, not completed; the next instance completes it and wakes the
conversation with the facts."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from tidings.tools.registry import Tool, ToolContext, ToolOutput
from tidings.types import Operation

RequestRestart = Callable[[ToolContext, str], Awaitable[Operation]]

PARAMETERS: Mapping[str, Any] = {
    "type": "object",
    "properties": {"reason": {"type": "string", "description": "Why the restart is needed."}},
}


def restart_tool(request: RequestRestart) -> Tool:
    async def run(context: ToolContext, arguments: Mapping[str, Any]) -> ToolOutput:
        reason = arguments.get("reason", "")
        operation = await request(context, reason if isinstance(reason, str) else "")
        return ToolOutput(
            f"restart accepted, not completed (operation {operation.operation_id}); you will "
            "be told when the runtime is back",
            meta={"operation_id": operation.operation_id, "status": "accepted"},
        )

    return Tool("restart", "Restart the runtime (accepted now, completed by the next instance).",
                run, parameters=PARAMETERS)
