"""A kettle MCP server that runs its tool as a task, on either tasks wire; the task ends later
-- when the test says so. Run as a stdio subprocess, or with ``--http PORT`` on loopback
streamable HTTP (its tasks then outlive the client that started them).

- The tasks extension's wire (2026-07-28, ``io.modelcontextprotocol/tasks``; the default): a
  client that declares the extension has every call of ``brew`` answered at once with a flat
  ``CreateTaskResult``; ``tasks/get`` carries the result inline.
- Core tasks (2025-11-25; ``SLOW_TASKS_WIRE=core``): a handshake-era server (it has no
  ``server/discover``, so a client falls back to ``initialize`` and negotiates 2025-11-25) that
  advertises ``tasks.requests.tools.call``, marks ``brew`` ``taskSupport: "optional"``, answers
  a ``tools/call`` whose params carry ``task`` with ``{"task": {...}}``, and serves
  ``tasks/get``, ``tasks/result`` and ``tasks/cancel`` in that revision's shapes.

Its tool ``brew(what)`` answers a call that is not made a task at once. As a task, it stays
``working`` until a marker file appears in the state directory (``SLOW_TASKS_DIR``):

- ``<what>.done``: the task completes with ``brewed <what>`` (inline in ``tasks/get`` on the
  extension, from ``tasks/result`` on core);
- ``<what>.fail``: the task fails with ``the kettle broke``;
- ``<what>.forget``: the server forgets the task (it answers that the task id is unknown).

The tasks live in ``tasks.json`` in that directory, so a new server process (the runtime was
restarted) knows the tasks an earlier one created. Every task created appends its ``what`` to
``runs.log`` (its body started), and every ``tasks/*`` request is appended to ``requests.log``
(``<pid> <method> <task id>``); ``tasks/cancel`` cancels the task. The poll
interval it suggests is ``SLOW_TASKS_POLL_MS`` (50 ms unless set); it answers a call
``SLOW_TASKS_ANSWER_DELAY_S`` after creating its task (at once unless set).
While the connection that created a task is open, the server also sends
``notifications/tasks`` (core: ``notifications/tasks/status``) when the task ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import MCPServer
from mcp.server.runner import serve_loop
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    CallToolRequestParams,
    CallToolResult,
    CancelTaskRequestParams,
    GetTaskPayloadRequestParams,
    GetTaskRequestParams,
    TextContent,
)

STATE = Path(os.environ.get("SLOW_TASKS_DIR", "."))
TASKS = STATE / "tasks.json"
CORE = os.environ.get("SLOW_TASKS_WIRE", "extension") == "core"
"""Whether the server speaks core tasks (2025-11-25) rather than the tasks extension."""
POLL_MS = int(os.environ.get("SLOW_TASKS_POLL_MS", "50"))
"""The interval the server suggests between two ``tasks/get`` of a task."""
ANSWER_DELAY_S = float(os.environ.get("SLOW_TASKS_ANSWER_DELAY_S", "0"))
"""How long the server takes to answer a call with the task it already created."""
TTL_MS = 3_600_000
ENDED = frozenset({"completed", "failed", "cancelled"})


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


def _create(params: Mapping[str, Any], ttl_ms: int) -> tuple[str, dict[str, Any]]:
    """A new working task for a call of ``brew``, its body counted in ``runs.log``."""
    task_id = uuid.uuid4().hex
    what = str((params.get("arguments") or {}).get("what", ""))
    with _tasks() as tasks:
        tasks[task_id] = {"what": what, "status": "working", "created": _now(),
                          "updated": _now(), "ttl": ttl_ms}
        created = tasks[task_id]
    with (STATE / "runs.log").open("a") as runs:
        runs.write(f"{what}\n")
    _log("tools/call", task_id)
    return task_id, created


def _result(task: dict[str, Any]) -> dict[str, Any]:
    """The call's result once its task ended (an error result for a failed one)."""
    if task["status"] == "completed":
        brewed = f"brewed {task['what']}"
        result = CallToolResult(content=[TextContent(text=brewed)],
                                structured_content={"result": brewed})
    else:
        result = CallToolResult(content=[TextContent(text="the kettle broke")], is_error=True)
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


def _core(task_id: str, task: dict[str, Any]) -> dict[str, Any]:
    """The task as core tasks have it (2025-11-25): its outcome comes from ``tasks/result``."""
    wire: dict[str, Any] = {
        "taskId": task_id, "status": task["status"], "createdAt": task["created"],
        "lastUpdatedAt": task["updated"], "ttl": task["ttl"], "pollInterval": POLL_MS}
    if task.get("message"):
        wire["statusMessage"] = task["message"]
    return wire


def _wire(task_id: str, task: dict[str, Any]) -> dict[str, Any]:
    """The task, flat, as the extension's wire has it (with its outcome once it ended)."""
    wire = _core(task_id, task)
    wire["ttlMs"], wire["pollIntervalMs"] = wire.pop("ttl"), wire.pop("pollInterval")
    if task["status"] == "completed":
        wire["result"] = _result(task)
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
        task_id, task = _create(params.model_dump(), TTL_MS)
        created = _wire(task_id, task)
        asyncio.get_running_loop().create_task(
            _tell_when_ended(ctx, task_id, "notifications/tasks", _wire))
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
    await _core_cancel(params.task_id)
    return {"resultType": "complete"}


async def _tell_when_ended(ctx: ServerRequestContext[Any, Any], task_id: str, method: str,
                           shape: Callable[[str, dict[str, Any]], dict[str, Any]]) -> None:
    """While this connection lasts: ``method`` (the task in ``shape``) once the task ended."""
    while True:
        await asyncio.sleep(0.02)
        with _tasks() as tasks:
            task = tasks.get(task_id)
            if task is None:
                return
            _advance(task)
            if task["status"] == "working":
                continue
            params = shape(task_id, task)
        with contextlib.suppress(Exception):
            # The SDK types the spec's own notifications; these go out raw.
            await ctx.session._connection.outbound.notify(method, params)
        return


# -- core tasks (2025-11-25) -------------------------------------------------------------------

TaskParams = GetTaskRequestParams | GetTaskPayloadRequestParams | CancelTaskRequestParams
CORE_CAPABILITY: dict[str, Any] = {"cancel": {}, "requests": {"tools": {"call": {}}}}
"""What the server advertises under ``capabilities.tasks``."""


async def core_tasks(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """Core tasks as middleware, ahead of the SDK's own handling: the SDK serves no core tasks
    (it sieves a ``tools/call`` answer down to a ``CallToolResult``, never advertises
    ``tasks`` nor a tool's ``execution``), so these answers are written here."""
    params: Mapping[str, Any] = ctx.params or {}
    if ctx.method == "server/discover":
        # A handshake-era server does not know the method: the client falls back to initialize.
        raise MCPError(code=METHOD_NOT_FOUND, message="Method not found", data=ctx.method)
    if ctx.method == "tools/call" and isinstance(params.get("task"), Mapping):
        task_id, task = _create(params, int(params["task"].get("ttl") or TTL_MS))
        asyncio.get_running_loop().create_task(
            _tell_when_ended(ctx, task_id, "notifications/tasks/status", _core))
        await asyncio.sleep(ANSWER_DELAY_S)
        return {"task": _core(task_id, task)}
    if ctx.method in CORE_METHODS:
        form, method = CORE_METHODS[ctx.method]
        task_id = form.model_validate(params).task_id
        _log(ctx.method, task_id)
        return await method(task_id)
    answer = await call_next(ctx)
    if ctx.method == "initialize" and isinstance(answer, dict):
        answer["capabilities"] = {**answer.get("capabilities", {}), "tasks": CORE_CAPABILITY}
    if ctx.method == "tools/list" and isinstance(answer, dict):
        for tool in answer.get("tools", []):
            tool["execution"] = {"taskSupport": "optional"}
    return answer


async def _core_get(task_id: str) -> dict[str, Any]:
    with _tasks() as tasks:
        return _core(task_id, _known(tasks, task_id))


async def _core_result(task_id: str) -> dict[str, Any]:
    """``tasks/result`` waits for the task's end, then gives its call's result."""
    while True:
        with _tasks() as tasks:
            task = _known(tasks, task_id)
            if task["status"] in ENDED:
                return _result(task)
        await asyncio.sleep(POLL_MS / 1000)


async def _core_cancel(task_id: str) -> dict[str, Any]:
    """Cancel the task if it still works; the task as it is then."""
    with _tasks() as tasks:
        task = _known(tasks, task_id)
        if task["status"] == "working":
            task.update(status="cancelled", message="cancelled on request", updated=_now())
        return _core(task_id, task)


CORE_METHODS: dict[str, tuple[type[TaskParams], Callable[[str], Awaitable[dict[str, Any]]]]] = {
    "tasks/get": (GetTaskRequestParams, _core_get),
    "tasks/result": (GetTaskPayloadRequestParams, _core_result),
    "tasks/cancel": (CancelTaskRequestParams, _core_cancel),
}
"""The core ``tasks/*`` methods: how their params read, and what answers them."""

server = MCPServer("kettle", extensions=[] if CORE else [KettleTasks()])
if CORE:
    server.middleware.append(core_tasks)


@server.tool()
def brew(what: str) -> str:
    """Brew something; as a task, it ends when the test says so."""
    return f"brewed {what} at once"


async def _handshake_only_stdio() -> None:
    """Serve stdio in the handshake era only: ``Server.run`` opens a modern connection on a
    ``server/discover`` probe and then refuses the ``initialize`` a client falls back to."""
    lowlevel = server._lowlevel_server
    async with stdio_server() as (read, write), lowlevel.lifespan(lowlevel) as state:
        await serve_loop(lowlevel, read, write, lifespan_state=state)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    elif CORE:
        anyio.run(_handshake_only_stdio)
    else:
        server.run()
