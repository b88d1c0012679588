"""The tools every runtime offers: ``shell``, the task and result readers, ``restart`` and the
child-conversation tools. A host's own tool of the same name wins."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from tidings.mail.relay import ChildRelay
from tidings.records.results import Results
from tidings.store import Store
from tidings.tasks.service import BackgroundTasks
from tidings.tasks.supervisor import Supervisor
from tidings.tools.children import CancelChild, RemoteChildren, child_tools
from tidings.tools.registry import ToolContext, ToolRegistry
from tidings.tools.restart import restart_tool
from tidings.tools.shell import shell_tool
from tidings.tools.tasks import task_tools
from tidings.types import Operation

BUILTIN_TOOLS = ("shell", "task_status", "wait", "task_output", "tool_result_get",
                 "tool_result_list", "restart", "spawn", "send", "cancel")
"""The names of the tools every runtime offers (a profile may name them without declaring
them); a test holds this list to what :func:`register_builtins` registers."""


class RequestRestart(Protocol):
    """The runtime's restart request (it commits the restart as accepted)."""

    async def __call__(
        self, conversation_id: str, *, reason: str, run_id: str, call_id: str,
        idempotency_key: str,
    ) -> Operation: ...


def register_builtins(
    registry: ToolRegistry, *, store: Store, supervisor: Supervisor, tasks: BackgroundTasks,
    results: Callable[[], Results | None], restart: RequestRestart, relay: ChildRelay,
    cancel_child: CancelChild, remote: RemoteChildren | None = None,
) -> None:
    """Register each built-in tool whose name the registry does not hold yet."""

    async def restart_from_tool(context: ToolContext, reason: str) -> Operation:
        return await restart(
            context.conversation_id, reason=reason, run_id=context.run_id,
            call_id=context.call_id,
            idempotency_key=f"restart-{context.run_id}-{context.call_id}"[:200],
        )

    for builtin in (shell_tool(supervisor, tasks), *task_tools(store, results),
                    restart_tool(restart_from_tool),
                    *child_tools(relay, cancel_child, remote)):
        if builtin.name not in registry:
            registry.register(builtin)


__all__ = ("BUILTIN_TOOLS", "register_builtins")
