"""The requests by which tidings starts and follows a task on one MCP server: a call made as
a task (``tools/call`` with a task), ``tasks/get``, the task's result, its input requests
answered, ``tasks/cancel`` -- on either tasks wire (:mod:`tidings.mcp.wire`).

:mod:`tidings.mcp.tasks` follows the task and decides when to ask; this module only asks, and
says what went wrong as the follower's errors: :class:`~tidings.mcp.tasks.ServerUnreachableError`
(ask again later), :class:`~tidings.mcp.tasks.TaskUnknownError` (the task is lost),
:class:`~tidings.mcp.tasks.TaskRefusedError` (the server answered a protocol error).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from mcp import Client, MCPError
from mcp_types import INVALID_PARAMS, METHOD_NOT_FOUND, CallToolResult
from pydantic import ValidationError

from tidings.mcp import results, wire
from tidings.mcp.asking import Asker, Asking
from tidings.mcp.calls import failure
from tidings.mcp.declaration import MCPServer
from tidings.mcp.link import Link
from tidings.mcp.tasks import (
    RemoteStatus,
    ServerUnreachableError,
    TaskRefusedError,
    TaskUnknownError,
)
from tidings.mcp.transport import RESULT_BOUND
from tidings.tools.registry import ToolOutput

_TASK_ID_LIMIT = 256
T = TypeVar("T")


class TaskRequests:
    """What one server is asked about its tasks, through the link."""

    def __init__(self, server: MCPServer, link: Link, asking: Asking) -> None:
        self.server = server
        self._link = link
        self.asking = asking

    async def start_task(self, tool: str, arguments: Mapping[str, Any]) -> str | ToolOutput:
        """Call ``tool`` as a task: the server's task id -- or, from a server that ran the call
        at once, its result; a refusal or a broken connection is a typed error."""
        timeout = self.server.timeout.total_seconds()
        kind = self._link.wire
        if kind is None:
            return results.failure(results.PROTOCOL, self.server.name, tool,
                                   "the server runs no tasks")
        try:
            answer = await self._link.exchange(lambda client: wire.call_as_task(
                client.session, tool, arguments, wire=kind, ttl=self.server.task_ttl,
                read_timeout_s=timeout), timeout)
        except Exception as exc:
            return failure(self.server.name, tool, exc)
        if isinstance(answer, CallToolResult):
            return results.tool_output(self.server.name, tool, answer, limit_bytes=RESULT_BOUND)
        task_id = answer.task_id
        if not 0 < len(task_id) <= _TASK_ID_LIMIT or not task_id.isprintable():
            return results.failure(results.PROTOCOL, self.server.name, tool,
                                   "the server named its task with an id tidings cannot keep")
        return task_id

    async def task_status(self, mcp_task_id: str) -> RemoteStatus:
        """``tasks/get``: how the server's task goes."""
        state = await self._task_request(lambda client, timeout: wire.get_task(
            client.session, mcp_task_id, read_timeout_s=timeout))
        return RemoteStatus(state.status, state.status_message,
                            wire.poll_interval(state, self.server.task_poll), state)

    async def task_output(self, state: wire.TaskState, tool: str) -> ToolOutput:
        """The result of the call an ended task ran (inline, or ``tasks/result``), read as a
        call's result is; an error the server answers instead is the call's typed error."""
        kind = self._link.wire or "core"
        try:
            result = await self._task_request(lambda client, timeout: wire.outcome(
                client.session, state, kind, read_timeout_s=timeout), refused_is_unknown=False)
        except TaskRefusedError as exc:
            return results.failure(results.PROTOCOL, self.server.name, tool, str(exc))
        return results.tool_output(self.server.name, tool, result, limit_bytes=RESULT_BOUND)

    async def answer_task(self, state: wire.TaskState, asker: Asker) -> None:
        """A task waits for input: on the extension, its input requests are asked and the
        answers sent (``tasks/update``); on core tasks, ``tasks/result`` is read, during which
        the server asks (and is answered) for the task."""
        timeout = self.server.timeout.total_seconds()
        if self._link.wire == "extension":
            if not state.input_requests:
                return
            requests = state.input_requests
            responses = await self.asking.answer_inputs(asker, requests)
            await self._task_request(lambda client, within: wire.update_task(
                client.session, state.task_id, responses, read_timeout_s=within))
            return
        with self.asking.task(state.task_id, asker):
            await self._link.exchange(lambda client: wire.outcome(
                client.session, state, "core", read_timeout_s=math.inf), timeout, asker.alive)

    async def cancel_task(self, mcp_task_id: str) -> None:
        """``tasks/cancel``: ask the server to stop its task."""
        await self._task_request(lambda client, timeout: wire.cancel_task(
            client.session, mcp_task_id, read_timeout_s=timeout))

    async def _task_request(self, send: Callable[[Client, float], Awaitable[T]], *,
                            refused_is_unknown: bool = True) -> T:
        timeout = self.server.timeout.total_seconds()
        try:
            return await self._link.exchange(lambda client: send(client, timeout), timeout)
        except TimeoutError as exc:
            raise ServerUnreachableError(str(exc)) from exc
        except ValidationError as exc:
            raise TaskRefusedError("the server's answer about the task is not valid") from exc
        except MCPError as exc:
            # "Invalid params" is how a server says it knows no such task; a server that no
            # longer serves tasks cannot say either.
            if refused_is_unknown and exc.code in (INVALID_PARAMS, METHOD_NOT_FOUND):
                raise TaskUnknownError(exc.error.message) from exc
            raise TaskRefusedError(exc.error.message) from exc


__all__ = ("TaskRequests",)
