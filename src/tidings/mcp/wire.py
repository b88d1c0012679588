"""MCP tasks on the wire, through the ``mcp`` SDK's own mechanisms.

A task-augmented ``tools/call`` (the call's params carry ``task``: how long the server should
keep it) is answered at once with the task the server created; ``tasks/get`` says how it is
going, ``tasks/result`` gives the call's result once it ended, ``tasks/cancel`` asks the server
to stop it, and ``notifications/tasks/status`` says, unasked, that its status changed.

The SDK carries the 2025-11-25 task types (:mod:`mcp_types`) and, from the 2026-07-28 revision
on, lets a task travel as an extension (``io.modelcontextprotocol/tasks``): the client claims
the ``task`` result shape of ``tools/call`` (:class:`TasksExtension`, a
:class:`~mcp.client.extension.ClientExtension`), the server serves the ``tasks/*`` methods
(:class:`~mcp.server.extension.Extension` method bindings) and says it does in its
capabilities. Requests go out through the client session's typed ``send_request``. On a
connection where the server does not advertise the extension, every call is an ordinary one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Literal

import anyio
from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, NotificationBinding, ResultClaim
from mcp_types import (
    CallToolRequest,
    CallToolRequestParams,
    CallToolResult,
    CancelTaskRequest,
    CancelTaskRequestParams,
    GetTaskPayloadRequest,
    GetTaskPayloadRequestParams,
    GetTaskRequest,
    GetTaskRequestParams,
    NotificationParams,
    Result,
    Task,
    TaskMetadata,
)
from mcp_types import Tool as MCPTool
from pydantic import TypeAdapter

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
"""The extension a server names in its capabilities when it runs tools as tasks."""
STATUS_NOTIFICATION = "notifications/tasks/status"
TERMINAL = frozenset({"completed", "failed", "cancelled"})
"""The statuses a task does not leave."""

_MIN_POLL = timedelta(milliseconds=20)


class TaskState(Task):
    """A task as a server describes it. The SDK's :class:`~mcp_types.Task`, read leniently: a
    server that leaves out ``ttl`` (unlimited) or a timestamp is still understood."""

    ttl: int | None = None
    created_at: str = ""
    last_updated_at: str = ""


class CreatedTask(Result):
    """The answer to a task-augmented ``tools/call``: the task the server created."""

    result_type: Literal["task"] = "task"
    task: TaskState


class _Got(Result, TaskState):
    """The answer to ``tasks/get`` and ``tasks/cancel``: the task now."""


class _StatusParams(NotificationParams, TaskState):
    """A ``notifications/tasks/status`` notification's params."""


_CALL_OR_TASK: TypeAdapter[CallToolResult | CreatedTask] = TypeAdapter(CallToolResult | CreatedTask)


def task_support(tool: MCPTool) -> str:
    """``forbidden``, ``optional`` or ``required``: whether the tool runs as a task, as the
    server lists it (its ``execution``, or its extension ``_meta``); ``optional`` when it does
    not say."""
    if tool.execution is not None and tool.execution.task_support is not None:
        return tool.execution.task_support
    said = (tool.meta or {}).get(TASKS_EXTENSION)
    support = said.get("taskSupport") if isinstance(said, Mapping) else None
    return support if support in ("forbidden", "optional", "required") else "optional"


def runs_tasks(client: Client) -> bool:
    """Whether the server runs tools as tasks (it advertises the tasks extension)."""
    return TASKS_EXTENSION in (client.server_capabilities.extensions or {})


class TasksExtension(ClientExtension):
    """The client's half of the tasks extension: the ``task`` shape of a ``tools/call`` result,
    and the status notifications, handed to ``on_status(task_id, status)``.

    A call made without asking for a task that the server answers with one anyway (a tool
    that only runs as a task) is followed here to its end, so the caller gets its result as
    from any call (bounded by the caller's own timeout).
    """

    identifier = TASKS_EXTENSION

    def __init__(self, on_status: Callable[[str, str], None], poll: timedelta) -> None:
        self._on_status = on_status
        self._poll = poll

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=self._to_the_end)]

    def notifications(self) -> Sequence[NotificationBinding[Any]]:
        return [NotificationBinding(method=STATUS_NOTIFICATION, params_type=_StatusParams,
                                    handler=self._status)]

    async def _status(self, params: _StatusParams) -> None:
        self._on_status(params.task_id, params.status)

    async def _to_the_end(self, created: CreatedTask, context: ClaimContext) -> CallToolResult:
        task: TaskState = created.task
        read_timeout_s = context.read_timeout_seconds
        while task.status not in TERMINAL:
            await anyio.sleep(poll_interval(task, self._poll).total_seconds())
            task = await context.session.send_request(
                GetTaskRequest(params=GetTaskRequestParams(task_id=task.task_id)), _Got,
                request_read_timeout_seconds=read_timeout_s)
        return await context.session.send_request(
            GetTaskPayloadRequest(params=GetTaskPayloadRequestParams(task_id=task.task_id)),
            CallToolResult, request_read_timeout_seconds=read_timeout_s)


def poll_interval(task: TaskState, cap: timedelta) -> timedelta:
    """How long to wait before asking about ``task`` again: what the server suggests, at most
    ``cap`` (and not less than a few milliseconds)."""
    if task.poll_interval is None:
        return cap
    return max(_MIN_POLL, min(cap, timedelta(milliseconds=task.poll_interval)))


async def call_as_task(
    client: Client, tool: str, arguments: Mapping[str, Any], *, ttl: timedelta,
    read_timeout_s: float,
) -> CallToolResult | CreatedTask:
    """A task-augmented ``tools/call``: the task the server created, or -- a server that ran
    the call at once -- its result."""
    request = CallToolRequest(params=CallToolRequestParams(
        name=tool, arguments=dict(arguments),
        task=TaskMetadata(ttl=int(ttl.total_seconds() * 1000))))
    return await client.session.send_request(request, _CALL_OR_TASK,
                                             request_read_timeout_seconds=read_timeout_s)


async def get_task(client: Client, task_id: str, *, read_timeout_s: float) -> TaskState:
    """``tasks/get``: the task now."""
    return await client.session.send_request(
        GetTaskRequest(params=GetTaskRequestParams(task_id=task_id)), _Got,
        request_read_timeout_seconds=read_timeout_s)


async def task_result(client: Client, task_id: str, *, read_timeout_s: float) -> CallToolResult:
    """``tasks/result``: the result of the call the task ran (it ended)."""
    return await client.session.send_request(
        GetTaskPayloadRequest(params=GetTaskPayloadRequestParams(task_id=task_id)),
        CallToolResult, request_read_timeout_seconds=read_timeout_s)


async def cancel_task(client: Client, task_id: str, *, read_timeout_s: float) -> TaskState:
    """``tasks/cancel``: the task, as the server has it after being asked to stop it."""
    return await client.session.send_request(
        CancelTaskRequest(params=CancelTaskRequestParams(task_id=task_id)), _Got,
        request_read_timeout_seconds=read_timeout_s)


__all__ = (
    "STATUS_NOTIFICATION", "TASKS_EXTENSION", "TERMINAL", "CreatedTask", "TaskState",
    "TasksExtension", "call_as_task", "cancel_task", "get_task", "poll_interval", "runs_tasks",
    "task_result", "task_support",
)
