"""One MCP server's connection: a long-lived component of the runtime, a
:class:`~tidings.lifetime.Loop` whose work is the connection.

Its work connects (starting the subprocess, or opening the HTTP session), lists the server's
tools and registers each as ``<server>.<tool>``, then holds the connection until it breaks --
the subprocess exits, the transport closes, a call finds it broken. A broken connection is
logged, counted, reported in the feed of the conversations concerned (see
:mod:`tidings.mcp.reports`) and tried again after a capped, jittered backoff, for as long as
the runtime runs; it is never dropped silently. Meanwhile its tools answer a typed
``mcp_unavailable`` error, and a call in flight when the connection breaks answers that error
too: never a hang, never a success. ``shutdown()`` closes the session and ends the subprocess
(a shutdown is not reported as a death).

When the server runs tools as tasks (:mod:`tidings.mcp.wire`), each tool that can run as one
also offers a ``background`` argument; a call made in the background (that argument, or the
profile's ``background`` list) is made as a task and followed by :mod:`tidings.mcp.tasks`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any, TypeVar

from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.message import SessionMessage
from mcp_types import CONNECTION_CLOSED, INVALID_PARAMS, METHOD_NOT_FOUND, CallToolResult
from mcp_types import Tool as MCPTool
from pydantic import ValidationError

from tidings.conversations import Conversations
from tidings.lifetime import Loop
from tidings.mcp import results, wire
from tidings.mcp.declaration import MCPServer
from tidings.mcp.metric_names import DISCONNECTS, RECONNECTS, UP
from tidings.mcp.reports import StatusReports
from tidings.mcp.tasks import (
    MCPTasks,
    RemoteStatus,
    ServerUnreachableError,
    TaskRefusedError,
    TaskUnknownError,
)
from tidings.metrics import Metrics
from tidings.policy import backoff
from tidings.tools.registry import Tool, ToolContext, ToolOutput, ToolRegistry

log = logging.getLogger("tidings.mcp")

_LIST_PAGES = 100  # a server whose listing never ends cannot hold the start forever
_TASK_ID_LIMIT = 256
BACKGROUND = {
    "type": "boolean",
    "description": ("Run it as a background task on its server: returns a task_key at once, "
                    "and you are told when it ends."),
}
"""The argument each tool of a server that runs tools as tasks offers (unless it has its own)."""
T = TypeVar("T")


class MCPConnection(Loop):
    """The connection to one declared server, and the tools it registered.

    ``conversations``: where the feed reports of its deaths and returns are written (none: not
    written, as for a connection made outside a runtime)."""

    def __init__(self, server: MCPServer, registry: ToolRegistry, metrics: Metrics,
                 *, rng: random.Random | None = None,
                 conversations: Conversations | None = None) -> None:
        super().__init__(f"tidings-mcp-{server.name}")
        self.server = server
        self._registry = registry
        self._metrics = metrics
        self._reports = StatusReports(server.name, conversations)
        self._rng = rng or random.Random()
        self._client: Client | None = None
        self._lost = asyncio.Event()
        self._reason = "not connected yet"
        self._tried = asyncio.Event()
        self._up = asyncio.Event()
        self.tasks: MCPTasks | None = None
        """Follows the tasks this server runs for background calls (set by the runtime)."""
        self._task_support: dict[str, str] = {}
        self.connections = 0
        """How many times this connection was made (1 after the first, +1 each reconnect)."""
        self._set_up(False)

    @property
    def up(self) -> bool:
        return self._client is not None

    async def tried(self) -> None:
        """Return once the first connection attempt ended, connected or not."""
        await self._tried.wait()

    # -- the component's work -----------------------------------------------------------------

    async def serve(self) -> None:
        failures = 0
        while True:
            lost = self._lost = asyncio.Event()
            try:
                async with self._connect(lost) as client:
                    async with asyncio.timeout(self.server.connect_timeout.total_seconds()):
                        tools = await _list_tools(client)
                    self._register(tools, wire.runs_tasks(client))
                    self._client, failures = client, 0
                    self.connections += 1
                    self._set_up(True)
                    self._up.set()
                    if self.connections > 1:
                        self._metrics.count(RECONNECTS, "MCP server connections made again "
                                            "after one broke, by server.",
                                            labels={"server": self.server.name})
                    log.info("MCP server %s connected (%s): %d tools", self.server.name,
                             self.server.transport, len(tools))
                    self._tried.set()
                    await self._reports.connected(self.connections)
                    await lost.wait()
            except Exception as exc:  # any failure of a connection is retried
                if not lost.is_set():
                    self._reason = _describe(exc)
            finally:
                was_up, self._client = self._client is not None, None
                self._up.clear()
                lost.set()
                self._set_up(False)
            self._tried.set()
            failures += 1
            delay = backoff(failures, self._rng, base=self.server.reconnect_base,
                            cap=self.server.reconnect_cap)
            log.warning("MCP server %s %s: %s; connecting again in %.2f s", self.server.name,
                        "disconnected" if was_up else "could not be connected", self._reason,
                        delay.total_seconds())
            if was_up:
                self._metrics.count(DISCONNECTS, "MCP server connections that broke, by server.",
                                    labels={"server": self.server.name})
                await self._reports.disconnected(self._reason)
            await asyncio.sleep(delay.total_seconds())

    @contextlib.asynccontextmanager
    async def _connect(self, lost: asyncio.Event) -> AsyncIterator[Client]:
        client = Client(_watched(self.server, lost, self._lose), cache=None,
                        read_timeout_seconds=self.server.timeout.total_seconds(),
                        extensions=[wire.TasksExtension(self._status, self.server.task_poll)])
        async with contextlib.AsyncExitStack() as stack:
            async with asyncio.timeout(self.server.connect_timeout.total_seconds()):
                await stack.enter_async_context(client)
            yield client

    def _lose(self, reason: str) -> None:
        if not self._lost.is_set():
            self._reason = reason
            self._lost.set()

    def _set_up(self, up: bool) -> None:
        self._metrics.set_gauge(UP, "1 while the MCP server is connected, by server.",
                                1.0 if up else 0.0, {"server": self.server.name})

    # -- the tools ----------------------------------------------------------------------------

    def _register(self, tools: list[MCPTool], tasks: bool) -> None:
        for tool in tools:
            self._task_support[tool.name] = wire.task_support(tool) if tasks else "forbidden"
            full = f"{self.server.name}.{tool.name}"
            if full in self._registry:
                continue  # registered at an earlier connection (or a host's own tool wins)
            parameters = dict(tool.input_schema)
            properties = parameters.get("properties")
            offers = (self._task_support[tool.name] != "forbidden"
                      and "background" not in (properties or {}))
            if offers:
                parameters["properties"] = {**(properties or {}), "background": BACKGROUND}
            try:
                self._registry.register(Tool(
                    full, tool.description or tool.title or tool.name,
                    _handler(self, tool.name, offers_background=offers), parameters,
                    read_only=bool(tool.annotations and tool.annotations.read_only_hint),
                ))
            except Exception as exc:  # a name tidings cannot offer is skipped
                log.warning("MCP server %s: tool %r is not offered: %s", self.server.name,
                            tool.name, exc)

    def runs_as_task(self, tool: str) -> bool:
        """Whether a call of ``tool`` can be made as a task (the server runs tools as tasks,
        and does not list this one as forbidden to)."""
        return self._client is not None and self._task_support.get(tool, "forbidden") != (
            "forbidden")

    async def until_up(self) -> None:
        """Return once the server is connected."""
        await self._up.wait()

    def _status(self, mcp_task_id: str, status: str) -> None:
        if self.tasks is not None:
            self.tasks.wake(self.server.name, mcp_task_id)

    async def _exchange(self, send: Callable[[Client], Awaitable[T]], within_s: float) -> T:
        """Send one request; its answer, or an error -- :class:`ServerUnreachableError` when
        not connected or when the connection broke meanwhile (it is then tried again),
        :class:`TimeoutError` past ``within_s`` seconds, the server's ``MCPError``, or a
        ``ValidationError`` for an answer that is not one."""
        client, lost = self._client, self._lost
        if client is None:
            raise ServerUnreachableError(self._reason)
        call = asyncio.ensure_future(send(client))
        broke = asyncio.ensure_future(lost.wait())
        try:
            done, _ = await asyncio.wait((call, broke), timeout=within_s,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            broke.cancel()
            if not call.done():
                call.cancel()
                with contextlib.suppress(BaseException):
                    await call
        if call not in done:
            if lost.is_set():
                raise ServerUnreachableError(
                    f"the connection broke during the call: {self._reason}")
            raise TimeoutError(f"no answer within {within_s:g} s")
        try:
            return call.result()
        except MCPError as exc:
            if exc.code != CONNECTION_CLOSED:
                raise
            self._lose("the connection closed")
        except ValidationError:
            raise
        except Exception as exc:  # a transport failure: the connection is gone
            self._lose(_describe(exc))
        raise ServerUnreachableError(f"the connection broke during the call: {self._reason}")

    async def call(self, tool: str, arguments: Mapping[str, Any], *,
                   conversation_id: str | None = None) -> ToolOutput:
        """Call ``tool`` on the server; a broken or absent connection is a typed error.

        ``conversation_id``: the conversation calling, one concerned by what becomes of the
        server from now on (its feed is told when the server dies, or is back)."""
        output = await self._call(tool, arguments)
        if conversation_id is not None:
            self._reports.called(conversation_id,
                                 failed=output.meta.get("error") == results.UNAVAILABLE)
        return output

    async def _call(self, tool: str, arguments: Mapping[str, Any]) -> ToolOutput:
        timeout = self.server.timeout.total_seconds()
        try:
            result = await self._exchange(lambda client: client.call_tool(
                tool, dict(arguments), read_timeout_seconds=timeout), timeout)
        except Exception as exc:
            return self._failure(tool, exc)
        return results.tool_output(self.server.name, tool, result)

    async def start_task(self, tool: str, arguments: Mapping[str, Any]) -> str | ToolOutput:
        """Call ``tool`` as a task: the server's task id -- or, from a server that ran the call
        at once, its result; a refusal or a broken connection is a typed error."""
        timeout = self.server.timeout.total_seconds()
        try:
            answer = await self._exchange(lambda client: wire.call_as_task(
                client, tool, arguments, ttl=self.server.task_ttl, read_timeout_s=timeout), timeout)
        except Exception as exc:
            return self._failure(tool, exc)
        if isinstance(answer, CallToolResult):
            return results.tool_output(self.server.name, tool, answer)
        task_id = answer.task.task_id
        if not 0 < len(task_id) <= _TASK_ID_LIMIT or not task_id.isprintable():
            return results.failure(results.PROTOCOL, self.server.name, tool,
                                   "the server named its task with an id tidings cannot keep")
        return task_id

    async def task_status(self, mcp_task_id: str) -> RemoteStatus:
        """``tasks/get``: how the server's task goes."""
        state = await self._task_request(lambda client, timeout: wire.get_task(
            client, mcp_task_id, read_timeout_s=timeout))
        return RemoteStatus(state.status, state.status_message,
                            wire.poll_interval(state, self.server.task_poll))

    async def task_output(self, mcp_task_id: str, tool: str) -> ToolOutput:
        """``tasks/result`` of an ended task, read as a call's result is; an error the server
        answers instead is the call's typed error (the call failed)."""
        try:
            result = await self._task_request(lambda client, timeout: wire.task_result(
                client, mcp_task_id, read_timeout_s=timeout), refused_is_unknown=False)
        except TaskRefusedError as exc:
            return results.failure(results.PROTOCOL, self.server.name, tool, str(exc))
        return results.tool_output(self.server.name, tool, result)

    async def cancel_task(self, mcp_task_id: str) -> None:
        """``tasks/cancel``: ask the server to stop its task."""
        await self._task_request(lambda client, timeout: wire.cancel_task(
            client, mcp_task_id, read_timeout_s=timeout))

    async def _task_request(self, send: Callable[[Client, float], Awaitable[T]], *,
                            refused_is_unknown: bool = True) -> T:
        timeout = self.server.timeout.total_seconds()
        try:
            return await self._exchange(lambda client: send(client, timeout), timeout)
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

    def _failure(self, tool: str, exc: Exception) -> ToolOutput:
        """A call's typed error for what went wrong around it."""
        name = self.server.name
        if isinstance(exc, ServerUnreachableError):
            return results.failure(results.UNAVAILABLE, name, tool, str(exc))
        if isinstance(exc, TimeoutError):
            return results.failure(results.TIMEOUT, name, tool, str(exc))
        if isinstance(exc, MCPError):
            return results.failure(results.PROTOCOL, name, tool, exc.error.message,
                                   code=exc.code)
        if isinstance(exc, ValidationError):
            return results.failure(results.PROTOCOL, name, tool,
                                   "the server's answer is not a valid result")
        raise exc


def _handler(connection: MCPConnection, tool: str, *, offers_background: bool) -> Any:
    async def handle(context: ToolContext, arguments: Mapping[str, Any]) -> ToolOutput:
        arguments = dict(arguments)
        asked = bool(arguments.pop("background", False)) if offers_background else False
        tasks = connection.tasks
        if ((asked or context.background) and tasks is not None
                and connection.runs_as_task(tool)):
            return await tasks.start(context, connection, tool, arguments)
        return await connection.call(tool, arguments, conversation_id=context.conversation_id)
    return handle


async def _list_tools(client: Client) -> list[MCPTool]:
    tools: list[MCPTool] = []
    cursor: str | None = None
    for _ in range(_LIST_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


@contextlib.asynccontextmanager
async def _watched(server: MCPServer, lost: asyncio.Event, lose: Any) -> AsyncIterator[Any]:
    """The SDK's transport for ``server``, its read side watched: the end of what the server
    sends (a subprocess that exited, a stream that closed) marks the connection lost."""
    async with contextlib.AsyncExitStack() as stack:
        if server.url is not None:
            http = await stack.enter_async_context(
                create_mcp_http_client(headers=dict(server.headers) or None))
            transport: Any = streamable_http_client(server.url, http_client=http)
        else:
            transport = stdio_client(StdioServerParameters(
                command=server.command[0], args=list(server.command[1:]),
                env=dict(server.env) or None, cwd=server.cwd))
        read, write = await stack.enter_async_context(transport)
        yield _WatchedRead(read, lambda: lose("the server closed the connection")), write


class _WatchedRead:
    """A read stream that says when it ends."""

    def __init__(self, inner: Any, ended: Any) -> None:
        self._inner = inner
        self._ended = ended

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)  # ``last_context`` and the like

    async def receive(self) -> SessionMessage | Exception:
        try:
            item: SessionMessage | Exception = await self._inner.receive()
        except Exception:
            self._ended()
            raise
        return item

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _WatchedRead:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            item: SessionMessage | Exception = await self._inner.__anext__()
        except (StopAsyncIteration, Exception):
            self._ended()
            raise
        return item

    async def __aenter__(self) -> _WatchedRead:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc_val: BaseException | None, exc_tb: TracebackType | None) -> None:
        await self.aclose()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _describe(exc.exceptions[0])
    if isinstance(exc, TimeoutError):
        return "no answer within the connect timeout"
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:300]


__all__ = ("MCPConnection",)
