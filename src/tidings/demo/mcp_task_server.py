"""The demo's MCP server that runs its tool as a task, written with the ``mcp`` SDK:
``python -m tidings.demo.mcp_task_server``.

It serves one tool, ``render`` (render the docs: a few pages, a second and a half), and runs it
as a task when the call asks for one: the call is answered at once with the task, the task
works on, and ``tasks/get``, ``tasks/result`` and ``tasks/cancel`` say how it goes, what it
gave and stop it. The tasks extension is how the SDK carries them; the server says when a task
ended with ``notifications/tasks/status``. Its tasks live as long as its process.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
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
    GetTaskPayloadRequestParams,
    GetTaskRequestParams,
    Task,
    TaskStatus,
    TaskStatusNotification,
    TaskStatusNotificationParams,
    TextContent,
)

RENDER_SECONDS = 1.5
POLL_MS = 200


def _now() -> str:
    return datetime.now(UTC).isoformat()


@dataclass
class _Job:
    pages: int
    ttl: int
    status: TaskStatus = "working"
    created: str = field(default_factory=_now)
    updated: str = field(default_factory=_now)
    work: asyncio.Task[None] | None = None

    def wire(self, task_id: str) -> Task:
        return Task(task_id=task_id, status=self.status, created_at=self.created,
                    last_updated_at=self.updated, ttl=self.ttl, poll_interval=POLL_MS)


JOBS: dict[str, _Job] = {}


def _rendered(pages: int) -> str:
    return f"rendered {pages} pages of docs"


def _job(task_id: str) -> _Job:
    job = JOBS.get(task_id)
    if job is None:
        raise MCPError(code=INVALID_PARAMS, message=f"no task {task_id}")
    return job


def _dump(task: Task) -> dict[str, Any]:
    return task.model_dump(by_alias=True, mode="json", exclude_none=True)


class RenderTasks(Extension):
    """The tasks extension: a task-augmented ``tools/call`` and the ``tasks/*`` methods."""

    identifier = "io.modelcontextprotocol/tasks"

    async def intercept_tool_call(self, params: CallToolRequestParams,
                                  ctx: ServerRequestContext[Any, Any],
                                  call_next: CallNext) -> HandlerResult:
        meta: dict[str, Any] = dict(ctx.meta or {})
        declared: dict[str, Any] = meta.get("io.modelcontextprotocol/clientCapabilities") or {}
        if self.identifier not in (declared.get("extensions") or {}):
            return await call_next(ctx)  # a client without tasks: an ordinary call
        task_id = uuid.uuid4().hex
        job = JOBS[task_id] = _Job(pages=int((params.arguments or {}).get("pages", 1)),
                                   ttl=3_600_000)
        job.work = asyncio.get_running_loop().create_task(_work(ctx, task_id, job))
        return {"resultType": "task", **_dump(job.wire(task_id))}  # flat, as the wire has it

    def methods(self) -> Sequence[MethodBinding]:
        return [MethodBinding("tasks/get", GetTaskRequestParams, _get),
                MethodBinding("tasks/result", GetTaskPayloadRequestParams, _result),
                MethodBinding("tasks/cancel", CancelTaskRequestParams, _cancel)]


async def _work(ctx: ServerRequestContext[Any, Any], task_id: str, job: _Job) -> None:
    await asyncio.sleep(RENDER_SECONDS)
    job.status, job.updated = "completed", _now()
    status = TaskStatusNotification(params=TaskStatusNotificationParams(
        **job.wire(task_id).model_dump()))
    with contextlib.suppress(Exception):
        # The SDK types the spec's own notifications; it sends an extension's as well.
        await ctx.session.send_notification(status)  # type: ignore[arg-type]


async def _get(ctx: ServerRequestContext[Any, Any], params: GetTaskRequestParams) -> Any:
    return _dump(_job(params.task_id).wire(params.task_id))


async def _result(ctx: ServerRequestContext[Any, Any],
                  params: GetTaskPayloadRequestParams) -> Any:
    job = _job(params.task_id)
    if job.status != "completed":
        raise MCPError(code=INVALID_PARAMS, message=f"task {params.task_id} is {job.status}")
    return CallToolResult(content=[TextContent(text=_rendered(job.pages))])


async def _cancel(ctx: ServerRequestContext[Any, Any], params: CancelTaskRequestParams) -> Any:
    job = _job(params.task_id)
    if job.status == "working" and job.work is not None:
        job.work.cancel()
        job.status, job.updated = "cancelled", _now()
    return _dump(job.wire(params.task_id))


server = MCPServer("docs", extensions=[RenderTasks()])


@server.tool()
async def render(pages: int) -> str:
    """Render the docs: a few pages, a second and a half."""
    await asyncio.sleep(RENDER_SECONDS)
    return _rendered(pages)


if __name__ == "__main__":
    server.run()
