"""MCP tasks on the wire, on both revisions servers speak today, through the ``mcp`` SDK.

- **Core tasks (2025-11-25).** A server that lists ``tasks.requests.tools.call`` in its
  capabilities runs a ``tools/call`` whose params carry ``task`` (how long to keep it) as a
  task: it answers ``{"task": {...}}`` at once. ``tasks/get`` says how the task goes,
  ``tasks/result`` gives the call's result once it ended, ``tasks/cancel`` stops it. A tool
  says in its ``execution.taskSupport`` whether it runs as a task (``forbidden`` unless it
  says so).
- **The tasks extension (2026-07-28, ``io.modelcontextprotocol/tasks``).** A client that
  declares the extension lets the server decide: a tool that can run as a task is answered
  with a flat ``CreateTaskResult`` (``taskId``, ``status``, ``ttlMs``, ``pollIntervalMs``,
  ``resultType: "task"``). ``tasks/get`` returns the result inline once the task ended
  (``result``, or ``error`` for a failed one, or ``inputRequests`` while it waits for input);
  ``tasks/update`` answers those requests; ``tasks/cancel`` stops it; ``notifications/tasks``
  may say, unasked, that it changed.

:class:`TaskState` reads a task in either shape (nested or flat, ``ttl`` or ``ttlMs``,
``pollInterval`` or ``pollIntervalMs``). Requests go out through the client session's typed
``send_request``; answers are read leniently here rather than by the SDK's models, which know
only the core shapes.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Literal

import anyio
from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, NotificationBinding, ResultClaim
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp_types import (
    METHOD_NOT_FOUND,
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
    TaskMetadata,
)
from mcp_types import Tool as MCPTool
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import AliasChoices, BaseModel, ConfigDict, Field

log = logging.getLogger("tidings.mcp")

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
"""The extension a server names in its capabilities when it runs tools as tasks (2026-07-28)."""
STATUS_NOTIFICATIONS = ("notifications/tasks/status", "notifications/tasks")
TERMINAL = frozenset({"completed", "failed", "cancelled"})
"""The statuses a task does not leave."""

Wire = Literal["core", "extension"]
"""How a server runs tools as tasks: core tasks (2025-11-25) or the tasks extension."""

_MIN_POLL = timedelta(milliseconds=20)

Answer = Callable[[str, Mapping[str, Any]], Awaitable[dict[str, Any]]]
"""Answers a task's input requests (``inputRequests``, by key): what ``tasks/update`` sends."""


class _Raw(Result):
    """An answer kept as the server sent it, read here rather than by the SDK's models."""

    model_config = ConfigDict(extra="allow")

    def data(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True)


class TaskState(BaseModel):
    """A task as a server describes it, in either revision's shape."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    task_id: str = Field(validation_alias=AliasChoices("taskId", "task_id"))
    status: str
    status_message: str | None = Field(
        default=None, validation_alias=AliasChoices("statusMessage", "status_message"))
    poll_interval_ms: int | None = Field(
        default=None, validation_alias=AliasChoices("pollIntervalMs", "pollInterval"))
    result: dict[str, Any] | None = None
    """The call's result, inline (the extension's ``tasks/get`` of a completed task)."""
    error: dict[str, Any] | None = None
    """The JSON-RPC error of a failed task (the extension's ``tasks/get``)."""
    input_requests: dict[str, Any] | None = Field(
        default=None, validation_alias=AliasChoices("inputRequests", "input_requests"))

    @property
    def ended(self) -> bool:
        return self.status in TERMINAL


def task_from(raw: Mapping[str, Any]) -> TaskState:
    """The task in a server's answer: nested under ``task`` (core) or flat (the extension)."""
    inner = raw.get("task")
    return TaskState.model_validate(inner if isinstance(inner, Mapping) else raw)


class CreatedTask(Result):
    """The claimed ``resultType: "task"`` answer to a ``tools/call`` (the tasks extension):
    kept as it came, read by :func:`task_from`."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = "task"

    def task(self) -> TaskState:
        return task_from(self.model_extra or {})


class _StatusParams(NotificationParams):
    model_config = ConfigDict(extra="allow")


def wire_of(client: Client) -> Wire | None:
    """How the server runs tools as tasks, if it does."""
    capabilities = client.server_capabilities
    if TASKS_EXTENSION in (capabilities.extensions or {}):
        return "extension"
    tasks = capabilities.tasks
    if tasks is not None and tasks.requests is not None and tasks.requests.tools is not None \
            and tasks.requests.tools.call is not None:
        return "core"
    return None


def task_support(tool: MCPTool, wire: Wire | None) -> str:
    """``forbidden``, ``optional`` or ``required``: whether the tool runs as a task on this
    server. Core tasks: the tool's ``execution.taskSupport`` (``forbidden`` when it does not
    say). The extension: that, or the extension's entry in the tool's ``_meta``, else
    ``optional`` (the server decides). No tasks at all: ``forbidden``."""
    if tool.execution is not None and tool.execution.task_support is not None:
        said: Any = tool.execution.task_support
    else:
        entry = (tool.meta or {}).get(TASKS_EXTENSION)
        said = entry.get("taskSupport") if isinstance(entry, Mapping) else None
    if said not in ("forbidden", "optional", "required"):
        said = "optional" if wire == "extension" else "forbidden"
    return "forbidden" if wire is None and said != "required" else str(said)


class TasksExtension(ClientExtension):
    """The client's half of the tasks extension: the ``task`` shape of a ``tools/call`` result,
    and the status notifications, handed to ``on_status(task_id)``.

    A call made in the foreground that the server runs as a task anyway is followed here to
    its end (bounded by the caller's own timeout; a caller that gives up cancels it on the
    server), so the caller gets its result as from any call.
    """

    identifier = TASKS_EXTENSION

    def __init__(self, on_status: Callable[[str], None], poll: timedelta,
                 answer: Answer | None = None) -> None:
        self._on_status = on_status
        self._poll = poll
        self._answer = answer

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=self._to_the_end,
                            protocol_versions=frozenset(MODERN_PROTOCOL_VERSIONS))]

    def notifications(self) -> Sequence[NotificationBinding[Any]]:
        return [NotificationBinding(method=method, params_type=_StatusParams,
                                    handler=self._status) for method in STATUS_NOTIFICATIONS]

    async def _status(self, params: _StatusParams) -> None:
        extra = params.model_extra or {}
        task_id = extra.get("taskId") or (extra.get("task") or {}).get("taskId")
        if isinstance(task_id, str):
            self._on_status(task_id)

    async def _to_the_end(self, created: CreatedTask, context: ClaimContext) -> CallToolResult:
        return await drive(context.session, created.task(), "extension", self._poll,
                           read_timeout_s=context.read_timeout_seconds, answer=self._answer)


def poll_interval(task: TaskState, cap: timedelta) -> timedelta:
    """How long to wait before asking about ``task`` again: what the server suggests, at most
    ``cap`` (and not less than a few milliseconds)."""
    if task.poll_interval_ms is None:
        return cap
    return max(_MIN_POLL, min(cap, timedelta(milliseconds=task.poll_interval_ms)))


async def drive(session: ClientSession, task: TaskState, wire: Wire, poll: timedelta, *,
                read_timeout_s: float | None, answer: Answer | None = None) -> CallToolResult:
    """Follow ``task`` to its end and return its call's result (a failed or cancelled task is
    an error result). A task that waits for input is answered: on the extension, its input
    requests by ``answer`` and ``tasks/update``; on core tasks, ``tasks/result``, during which
    the server asks (the session's callbacks answer). A caller that stops waiting (cancelled,
    or its deadline passed) has the server cancel the task, so nothing runs on that nobody
    will read."""
    try:
        while not task.ended:
            if task.status == "input_required" and wire == "core":
                return await outcome(session, task, wire, read_timeout_s=read_timeout_s)
            if task.status == "input_required" and task.input_requests and answer is not None:
                responses = await answer(task.task_id, task.input_requests)
                await update_task(session, task.task_id, responses,
                                  read_timeout_s=read_timeout_s)
            else:
                await anyio.sleep(poll_interval(task, poll).total_seconds())
            task = await get_task(session, task.task_id, read_timeout_s=read_timeout_s)
        return await outcome(session, task, wire, read_timeout_s=read_timeout_s)
    except BaseException:
        if not task.ended:
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                with anyio.fail_after(5):
                    await cancel_task(session, task.task_id, read_timeout_s=5)
        raise


async def call_as_task(
    session: ClientSession, tool: str, arguments: Mapping[str, Any], *, wire: Wire,
    ttl: timedelta, read_timeout_s: float | None, progress: Any = None,
) -> CallToolResult | TaskState:
    """A ``tools/call`` made to run as a task: the task the server created, or -- a server
    that ran the call at once -- its result."""
    if wire == "extension":
        answer = await session.call_tool(tool, dict(arguments), read_timeout_s, progress,
                                         allow_claimed=True)
        if isinstance(answer, CreatedTask):
            return answer.task()
        if isinstance(answer, CallToolResult):
            return answer
        raise TypeError(f"the server answered the call with a {type(answer).__name__}")
    request = CallToolRequest(params=CallToolRequestParams(
        name=tool, arguments=dict(arguments),
        task=TaskMetadata(ttl=int(ttl.total_seconds() * 1000))))
    # The SDK validates a 2025-11-25 tools/call answer as a CallToolResult only: the task it
    # creates is read here.
    raw = await raw_request(session, request.model_dump(by_alias=True, mode="json",
                                                        exclude_none=True),
                            read_timeout_s=read_timeout_s, progress=progress)
    if isinstance(raw.get("task"), Mapping):
        return task_from(raw)
    return CallToolResult.model_validate(raw)


async def get_task(session: ClientSession, task_id: str, *,
                   read_timeout_s: float | None) -> TaskState:
    """``tasks/get``: the task now."""
    raw = await session.send_request(
        GetTaskRequest(params=GetTaskRequestParams(task_id=task_id)), _Raw,
        request_read_timeout_seconds=read_timeout_s)
    return task_from(raw.data())


async def outcome(session: ClientSession, task: TaskState, wire: Wire, *,
                  read_timeout_s: float | None) -> CallToolResult:
    """The result of the call an ended task ran: inline (the extension), or ``tasks/result``
    (core). A failed task without a result is an error result saying why; a cancelled one
    says it was cancelled."""
    if task.result is not None:
        return CallToolResult.model_validate(task.result)
    if task.status == "cancelled":
        return _error_result(task.status_message or "the task was cancelled on the server")
    said = (task.error or {}).get("message") or task.status_message
    if task.error is not None:
        return _error_result(str(said or "the task failed"))
    try:
        raw = await session.send_request(
            GetTaskPayloadRequest(params=GetTaskPayloadRequestParams(task_id=task.task_id)),
            _Raw, request_read_timeout_seconds=read_timeout_s)
    except MCPError as exc:
        if wire == "core" or exc.code != METHOD_NOT_FOUND:
            raise
        # The extension has no tasks/result: a server that gave nothing inline gave nothing.
        return _error_result(str(said or f"the task {task.status} without a result"))
    return CallToolResult.model_validate(raw.data())


async def update_task(session: ClientSession, task_id: str, responses: Mapping[str, Any], *,
                      read_timeout_s: float | None) -> None:
    """``tasks/update`` (the extension): the answers to a task's input requests."""
    await raw_request(session, {"method": "tasks/update", "params": {
        "taskId": task_id, "inputResponses": dict(responses)}}, read_timeout_s=read_timeout_s)


async def cancel_task(session: ClientSession, task_id: str, *,
                      read_timeout_s: float | None) -> None:
    """``tasks/cancel``: ask the server to stop its task."""
    await session.send_request(
        CancelTaskRequest(params=CancelTaskRequestParams(task_id=task_id)), _Raw,
        request_read_timeout_seconds=read_timeout_s)


async def raw_request(session: ClientSession, data: dict[str, Any], *,
                      read_timeout_s: float | None, progress: Any = None) -> dict[str, Any]:
    """Send the request ``data`` (``method``, ``params``) and return the answer as the server
    sent it, unvalidated. Through the session's own stamp (protocol version, capabilities)
    and dispatcher, as the SDK's subscriptions do: its typed ``send_request`` validates every
    answer against the core shapes, which leaves out a core task and a malformed tool."""
    opts: Any = {}
    if read_timeout_s is not None:
        opts["timeout"] = read_timeout_s
    if progress is not None:
        opts["on_progress"] = progress
    session._stamp(data, opts)
    raw: dict[str, Any] = await session._dispatcher.send_raw_request(
        data["method"], data.get("params"), opts)
    return raw


def _error_result(text: str) -> CallToolResult:
    return CallToolResult.model_validate(
        {"content": [{"type": "text", "text": text}], "isError": True})


__all__ = (
    "STATUS_NOTIFICATIONS", "TASKS_EXTENSION", "TERMINAL", "CreatedTask", "TaskState",
    "TasksExtension", "Wire", "call_as_task", "cancel_task", "drive", "get_task", "outcome",
    "poll_interval", "raw_request", "task_from", "task_support", "update_task", "wire_of",
)
