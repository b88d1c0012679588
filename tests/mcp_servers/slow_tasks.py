"""A kettle MCP server that runs its tool as a task, on the tasks extension's wire (2026-07-28,
``io.modelcontextprotocol/tasks``): a client that declares the extension has every call of
``brew`` answered at once with a flat ``CreateTaskResult``; the task ends later -- when the
test says so. Run as a stdio subprocess.

Its tool ``brew(what)`` answers a client without the extension at once. As a task, it stays
``working`` until a marker file appears in the state directory (``SLOW_TASKS_DIR``):

- ``<what>.done``: the task completes; ``tasks/get`` returns its result inline (``brewed
  <what>``);
- ``<what>.fail``: the task fails; ``tasks/get`` returns its error (``the kettle broke``);
- ``<what>.forget``: the server forgets the task (it answers that the task id is unknown).

The tasks live in ``tasks.json`` in that directory, so a new server process (the runtime was
restarted) knows the tasks an earlier one created. Every ``tasks/*`` request is appended to
``requests.log`` (``<pid> <method> <task id>``); ``tasks/cancel`` cancels the task. The poll
interval it suggests is ``SLOW_TASKS_POLL_MS`` (50 ms unless set); it answers a call
``SLOW_TASKS_ANSWER_DELAY_S`` after creating its task (at once unless set).
While the connection that created a task is open, the server also sends
``notifications/tasks`` when the task ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    CancelTaskRequestParams,
    GetTaskRequestParams,
    TextContent,
)

STATE = Path(os.environ.get("SLOW_TASKS_DIR", "."))
TASKS = STATE / "tasks.json"
POLL_MS = int(os.environ.get("SLOW_TASKS_POLL_MS", "50"))
ANSWER_DELAY_S = float(os.environ.get("SLOW_TASKS_ANSWER_DELAY_S", "0"))
"""How long the server takes to answer a call with the task it already created."""
"""The interval the server suggests between two ``tasks/get`` of a task."""


def _now() -> str:
    return datetime.now(UTC).isoformat()


@contextlib.contextmanager
def _tasks() -> Iterator[dict[str, dict[str, Any]]]:
    """The tasks, read and written back under a lock (two server processes may share them)."""
    STATE.mkdir(parents=True, exist_ok=True)
    with (STATE / "tasks.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        tasks = json.loads(TASKS.read_text()) if TASKS.exists() else {}
        yield tasks
        scratch = TASKS.with_suffix(".tmp")
        scratch.write_text(json.dumps(tasks))
        os.replace(scratch, TASKS)


def _log(method: str, task_id: str) -> None:
    with (STATE / "requests.log").open("a") as log:
        log.write(f"{os.getpid()} {method} {task_id}\n")


def _advance(task: dict[str, Any]) -> None:
    """Move a working task on if its marker is there."""
    if task["status"] != "working":
        return
    for marker, status in (("done", "completed"), ("fail", "failed")):
        if (STATE / f"{task['what']}.{marker}").exists():
            task["status"] = status
            task["updated"] = _now()


def _known(tasks: dict[str, dict[str, Any]], task_id: str) -> dict[str, Any]:
    task = tasks.get(task_id)
    if task is not None and (STATE / f"{task['what']}.forget").exists():
        del tasks[task_id]
        task = None
    if task is None:
        raise MCPError(code=INVALID_PARAMS, message=f"no task {task_id}")
    _advance(task)
    return task


def _wire(task_id: str, task: dict[str, Any]) -> dict[str, Any]:
    """The task, flat, as the extension's wire has it (with its outcome once it ended)."""
    wire: dict[str, Any] = {
        "taskId": task_id, "status": task["status"], "createdAt": task["created"],
        "lastUpdatedAt": task["updated"], "ttlMs": task["ttl"], "pollIntervalMs": POLL_MS}
    if task.get("message"):
        wire["statusMessage"] = task["message"]
    if task["status"] == "completed":
        brewed = f"brewed {task['what']}"
        wire["result"] = CallToolResult(content=[TextContent(text=brewed)],
                                        structured_content={"result": brewed},
                                        ).model_dump(by_alias=True, mode="json",
                                                     exclude_none=True)
    if task["status"] == "failed":
        wire["error"] = {"code": -32603, "message": "the kettle broke"}
    return wire


def _opted_in(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the client declared the tasks extension for this request."""
    meta: dict[str, Any] = dict(ctx.meta or {})
    capabilities: dict[str, Any] = meta.get("io.modelcontextprotocol/clientCapabilities") or {}
    return EXTENSION in (capabilities.get("extensions") or {})


EXTENSION = "io.modelcontextprotocol/tasks"


class KettleTasks(Extension):
    """The tasks extension: ``tools/call`` answered with a task, and the ``tasks/*`` methods."""

    identifier = EXTENSION

    async def intercept_tool_call(self, params: CallToolRequestParams,
                                  ctx: ServerRequestContext[Any, Any],
                                  call_next: CallNext) -> HandlerResult:
        if not _opted_in(ctx):
            return await call_next(ctx)
        task_id = uuid.uuid4().hex
        what = str((params.arguments or {}).get("what", ""))
        with _tasks() as tasks:
            tasks[task_id] = {"what": what, "status": "working", "created": _now(),
                              "updated": _now(), "ttl": 3_600_000}
            created = _wire(task_id, tasks[task_id])
        _log("tools/call", task_id)
        asyncio.get_running_loop().create_task(_tell_when_ended(ctx, task_id))
        await asyncio.sleep(ANSWER_DELAY_S)
        return {"resultType": "task", **created}

    def methods(self) -> Sequence[MethodBinding]:
        return [
            MethodBinding("tasks/get", GetTaskRequestParams, _get),
            MethodBinding("tasks/cancel", CancelTaskRequestParams, _cancel),
        ]


async def _get(ctx: ServerRequestContext[Any, Any], params: GetTaskRequestParams) -> Any:
    _log("tasks/get", params.task_id)
    with _tasks() as tasks:
        return {"resultType": "complete", **_wire(params.task_id, _known(tasks, params.task_id))}


async def _cancel(ctx: ServerRequestContext[Any, Any], params: CancelTaskRequestParams) -> Any:
    _log("tasks/cancel", params.task_id)
    with _tasks() as tasks:
        task = _known(tasks, params.task_id)
        if task["status"] == "working":
            task.update(status="cancelled", message="cancelled on request", updated=_now())
        return {"resultType": "complete"}


async def _tell_when_ended(ctx: ServerRequestContext[Any, Any], task_id: str) -> None:
    """While this connection lasts: ``notifications/tasks`` once the task ended."""
    while True:
        await asyncio.sleep(0.02)
        with _tasks() as tasks:
            task = tasks.get(task_id)
            if task is None:
                return
            _advance(task)
            if task["status"] == "working":
                continue
            params = _wire(task_id, task)
        with contextlib.suppress(Exception):
            # The SDK types the spec's own notifications; an extension's goes out raw.
            await ctx.session._connection.outbound.notify("notifications/tasks", params)
        return


server = MCPServer("kettle", extensions=[KettleTasks()])


@server.tool()
def brew(what: str) -> str:
    """Brew something; as a task, it ends when the test says so."""
    return f"brewed {what} at once"


if __name__ == "__main__":
    server.run()
