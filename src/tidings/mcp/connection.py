"""One MCP server's connection: a long-lived component of the runtime, a
:class:`~tidings.support.lifetime.Loop` whose work is the connection.

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
import math
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from importlib.metadata import PackageNotFoundError, version
from types import TracebackType
from typing import Any, TypeVar

from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.message import SessionMessage
from mcp_types import (
    CONNECTION_CLOSED,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    CallToolResult,
    Implementation,
    ListToolsResult,
)
from mcp_types import Tool as MCPTool
from pydantic import ValidationError

from tidings.clock import Clock, SystemClock
from tidings.conversations.catalog import Conversations
from tidings.conversations.questions import Questions
from tidings.mcp import oauth, results, wire
from tidings.mcp.asking import Asker, Asking
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
from tidings.support.lifetime import Loop
from tidings.support.metrics import Metrics
from tidings.support.policy import backoff
from tidings.tools.registry import Tool, ToolContext, ToolOutput, ToolRegistry

log = logging.getLogger("tidings.mcp")

_LIST_PAGES = 100  # a server whose listing never ends cannot hold the start forever
_TASK_ID_LIMIT = 256
RESULT_BOUND = 2 * 1024 * 1024
"""The largest result (UTF-8 text) that arrives whole: a result envelope's bound."""
SSE_EVENT_LIMIT = 8 * RESULT_BOUND
"""What one server-sent event may carry: a result of ``RESULT_BOUND`` bytes of text as JSON,
escaped (``\\uXXXX`` for every character at worst is six bytes), with room to spare. The SDK's
own default (1 MiB) dropped the whole connection for a larger result."""


def client_info() -> Implementation:
    """How tidings introduces itself to a server: ``tidings`` and its version."""
    try:
        own = version("tidings")
    except PackageNotFoundError:  # run from a checkout that was not installed
        own = "0"
    return Implementation(name="tidings", version=own)
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
                 conversations: Conversations | None = None,
                 questions: Questions | None = None,
                 tokens: oauth.SealedTokens | None = None,
                 tasks: MCPTasks | None = None, clock: Clock | None = None) -> None:
        super().__init__(f"tidings-mcp-{server.name}")
        self._clock: Clock = clock or SystemClock()
        self._tokens = tokens  # an OAuth server's tokens (none: it is sent no OAuth)
        self.asking = Asking(server, questions)
        """What the server asks during calls and for its tasks (elicitation, sampling)."""
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
        self._refused: int | None = None
        """The HTTP status (401, 403) the server refused tidings with, while it does."""
        self._refused_why = ""
        self.tasks = tasks
        """Follows the tasks this server runs for background calls (none: calls are never
        made as tasks)."""
        self.wire: wire.Wire | None = None
        """How the connected server runs tools as tasks, if it does."""
        self._task_support: dict[str, str] = {}
        self.skipped: dict[str, str] = {}
        """Tools the server listed that are not offered, and why."""
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
            refused_before = self._refused
            try:
                async with self._connect(lost) as client:
                    async with asyncio.timeout(self.server.connect_timeout.total_seconds()):
                        tools, malformed = await _list_tools(client)
                    self.wire = wire.wire_of(client)
                    offered = self._register(tools, malformed)
                    self._client, failures, self._refused = client, 0, None
                    self.connections += 1
                    self._set_up(True)
                    self._up.set()
                    if self.connections > 1:
                        self._metrics.count(RECONNECTS, "MCP server connections made again "
                                            "after one broke, by server.",
                                            labels={"server": self.server.name})
                    log.info("MCP server %s connected (%s%s): %d tools%s", self.server.name,
                             self.server.transport,
                             f", {self.wire} tasks" if self.wire else "", offered,
                             f", {len(self.skipped)} skipped" if self.skipped else "")
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
            if self._refused is not None:
                # Refused: said once, with what to do; asked again only at the cap, quietly.
                if refused_before != self._refused:
                    self._reason = oauth.refusal(self.server, self._refused,
                                                 self._refused_why)
                    log.error("MCP server %s refused tidings: %s", self.server.name,
                              self._reason)
                    await self._reports.refused(self._refused, self._reason)
                await self._clock.sleep(self.server.reconnect_cap.total_seconds())
                continue
            delay = backoff(failures, self._rng, base=self.server.reconnect_base,
                            cap=self.server.reconnect_cap)
            log.warning("MCP server %s %s: %s; connecting again in %.2f s", self.server.name,
                        "disconnected" if was_up else "could not be connected", self._reason,
                        delay.total_seconds())
            if was_up:
                self._metrics.count(DISCONNECTS, "MCP server connections that broke, by server.",
                                    labels={"server": self.server.name})
                await self._reports.disconnected(self._reason)
            await self._clock.sleep(delay.total_seconds())

    @contextlib.asynccontextmanager
    async def _connect(self, lost: asyncio.Event) -> AsyncIterator[Client]:
        asking = self.asking
        client = Client(_watched(self.server, self._lose, self._refuse, self._tokens),
                        cache=None,
                        client_info=client_info(),
                        read_timeout_seconds=self.server.timeout.total_seconds(),
                        elicitation_callback=asking.elicit,
                        sampling_callback=(None if self.server.sampling == "refuse"
                                           else asking.sample),
                        list_roots_callback=asking.roots if self.server.roots else None,
                        extensions=[wire.TasksExtension(self._status, self.server.task_poll,
                                                        asking.answer_current)])
        async with contextlib.AsyncExitStack() as stack:
            async with asyncio.timeout(self.server.connect_timeout.total_seconds()):
                await stack.enter_async_context(client)
            yield client

    def _lose(self, reason: str) -> None:
        if not self._lost.is_set():
            self._reason = reason
            self._lost.set()

    def _refuse(self, status: int, why: str = "") -> None:
        self._refused, self._refused_why = status, why
        self._lose(oauth.refusal(self.server, status, why))

    def _set_up(self, up: bool) -> None:
        self._metrics.set_gauge(UP, "1 while the MCP server is connected, by server.",
                                1.0 if up else 0.0, {"server": self.server.name})

    # -- the tools ----------------------------------------------------------------------------

    def _register(self, tools: list[MCPTool], malformed: dict[str, str]) -> int:
        """Register the server's tools; how many it offers. A tool that cannot be offered (a
        malformed listing, a name tidings cannot offer, one that only runs as a task on a
        server that runs none) is skipped with a warning: never the whole server."""
        skipped = dict(malformed)
        offered = 0
        for tool in tools:
            if tool.input_schema.get("type") != "object":  # no model takes such parameters
                skipped[tool.name] = (f"its listing is not valid: inputSchema: the type is "
                                      f"{tool.input_schema.get('type')!r}, not 'object'")
                continue
            support = wire.task_support(tool, self.wire)
            if support == "required" and self.wire is None:
                skipped[tool.name] = "it only runs as a task, and the server runs no tasks"
                continue
            self._task_support[tool.name] = support
            full = f"{self.server.name}.{tool.name}"
            if full in self._registry:
                offered += 1
                continue  # registered at an earlier connection (or a host's own tool wins)
            parameters = dict(tool.input_schema)
            properties = parameters.get("properties")
            offers = support == "optional" and "background" not in (properties or {})
            if offers:
                parameters["properties"] = {**(properties or {}), "background": BACKGROUND}
            try:
                self._registry.register(Tool(
                    full, tool.description or tool.title or tool.name,
                    _handler(self, tool.name, offers_background=offers), parameters,
                    read_only=bool(tool.annotations and tool.annotations.read_only_hint),
                ))
            except Exception as exc:  # a name tidings cannot offer is skipped
                skipped[tool.name] = str(exc)
                continue
            offered += 1
        for name, why in skipped.items():
            if self.skipped.get(name) != why:
                log.warning("MCP server %s: tool %r is not offered: %s", self.server.name,
                            name, why)
        self.skipped = skipped
        self._reports.skipped = dict(skipped)
        return offered

    def task_support(self, tool: str) -> str:
        """``forbidden``, ``optional`` or ``required``: how ``tool`` runs as a task here."""
        if self._client is None:
            return "forbidden"
        return self._task_support.get(tool, "forbidden")

    def runs_as_task(self, tool: str) -> bool:
        """Whether a call of ``tool`` can be made as a task (the server runs tools as tasks,
        and does not list this one as forbidden to)."""
        return self.task_support(tool) != "forbidden"

    async def until_up(self) -> None:
        """Return once the server is connected."""
        await self._up.wait()

    def _status(self, mcp_task_id: str) -> None:
        if self.tasks is not None:
            self.tasks.wake(self.server.name, mcp_task_id)

    async def _exchange(self, send: Callable[[Client], Awaitable[T]], within_s: float,
                        alive: asyncio.Event | None = None) -> T:
        """Send one request; its answer, or an error -- :class:`ServerUnreachableError` when
        not connected or when the connection broke meanwhile (it is then tried again),
        :class:`TimeoutError` past ``within_s`` seconds without an answer (or, with
        ``alive``, without a sign of life: each one starts the wait again), the server's
        ``MCPError``, or a ``ValidationError`` for an answer that is not one."""
        client, lost = self._client, self._lost
        if client is None:
            raise ServerUnreachableError(self._reason)
        call = asyncio.ensure_future(send(client))
        broke = asyncio.ensure_future(lost.wait())
        waits: set[asyncio.Future[Any]] = {call, broke}
        try:
            while True:
                lively = None if alive is None else asyncio.ensure_future(alive.wait())
                try:
                    done, _ = await asyncio.wait(
                        waits if lively is None else {*waits, lively}, timeout=within_s,
                        return_when=asyncio.FIRST_COMPLETED)
                finally:
                    if lively is not None:
                        lively.cancel()
                if alive is not None and alive.is_set() and not done & waits:
                    alive.clear()  # a sign of life: the idle wait starts again
                    continue
                break
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
            if exc.error.message.startswith("SSE stream failed"):
                # One answer the transport would not take (too large): this call's failure,
                # not the connection's.
                raise
            self._lose("the connection closed")
        except (ValueError, TypeError, RuntimeError):
            raise  # an answer this client cannot take (ValidationError too): the call's failure
        except Exception as exc:  # a transport failure: the connection is gone
            self._lose(_describe(exc))
        raise ServerUnreachableError(f"the connection broke during the call: {self._reason}")

    async def call(self, tool: str, arguments: Mapping[str, Any], *,
                   conversation_id: str | None = None, ids: ToolContext | None = None
                   ) -> ToolOutput:
        """Call ``tool`` on the server; a broken or absent connection is a typed error.

        ``conversation_id``: the conversation calling, one concerned by what becomes of the
        server from now on (its feed is told when the server dies, or is back, and of the
        call's progress). A tool that only runs as a task is called as one and followed to
        its end."""
        conversation_id = conversation_id or (ids.conversation_id if ids else None)
        if conversation_id is not None:
            await self._reports.tell_skipped(conversation_id)
        output = await self._call(tool, arguments, ids)
        if conversation_id is not None:
            self._reports.called(conversation_id,
                                 failed=output.meta.get("error") == results.UNAVAILABLE)
        return output

    async def _call(self, tool: str, arguments: Mapping[str, Any],
                    ids: ToolContext | None) -> ToolOutput:
        alive = asyncio.Event()
        progress = self._reports.progress_of(ids, tool, alive)
        as_task = self.task_support(tool) == "required" and self.wire == "core"
        asker = None if ids is None else Asker(
            ids.conversation_id, f"mcp:{self.server.name}:{ids.run_id}:{ids.call_id}",
            run_id=ids.run_id, alive=alive, sample=ids.sample)
        try:
            with self.asking.calling(asker):
                result = await self._call_once(tool, arguments, progress, alive, as_task)
        except Exception as exc:
            return self._failure(tool, exc)
        finally:
            await progress.close()
        return results.tool_output(self.server.name, tool, result, limit_bytes=RESULT_BOUND)

    async def _call_once(self, tool: str, arguments: Mapping[str, Any], progress: Any,
                         alive: asyncio.Event, as_task: bool) -> CallToolResult:
        timeout = self.server.timeout.total_seconds()
        if as_task:
            return await self._exchange(lambda client: self._task_to_the_end(
                client, tool, arguments, progress), timeout, alive)
        # The idle wait is tidings' own (each progress starts it again): the SDK's clock would
        # end a call that keeps reporting at ``timeout``.
        return await self._exchange(lambda client: client.call_tool(
            tool, dict(arguments), read_timeout_seconds=math.inf,
            progress_callback=progress), timeout, alive)

    async def _task_to_the_end(self, client: Client, tool: str, arguments: Mapping[str, Any],
                               progress: Any) -> CallToolResult:
        assert self.wire is not None
        timeout = self.server.timeout.total_seconds()
        started = await wire.call_as_task(client.session, tool, arguments, wire=self.wire,
                                          ttl=self.server.task_ttl, read_timeout_s=timeout,
                                          progress=progress)
        if isinstance(started, CallToolResult):
            return started
        # Followed without the SDK's clock: the idle wait around it (_exchange) bounds it, and
        # a person answering the task's question is not idle.
        return await wire.drive(client.session, started, self.wire, self.server.task_poll,
                                read_timeout_s=math.inf, answer=self.asking.answer_current)

    async def start_task(self, tool: str, arguments: Mapping[str, Any]) -> str | ToolOutput:
        """Call ``tool`` as a task: the server's task id -- or, from a server that ran the call
        at once, its result; a refusal or a broken connection is a typed error."""
        timeout = self.server.timeout.total_seconds()
        kind = self.wire
        if kind is None:
            return results.failure(results.PROTOCOL, self.server.name, tool,
                                   "the server runs no tasks")
        try:
            answer = await self._exchange(lambda client: wire.call_as_task(
                client.session, tool, arguments, wire=kind, ttl=self.server.task_ttl,
                read_timeout_s=timeout), timeout)
        except Exception as exc:
            return self._failure(tool, exc)
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
        kind = self.wire or "core"
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
        if self.wire == "extension":
            if not state.input_requests:
                return
            requests = state.input_requests
            responses = await self.asking.answer_inputs(asker, requests)
            await self._task_request(lambda client, within: wire.update_task(
                client.session, state.task_id, responses, read_timeout_s=within))
            return
        with self.asking.task(state.task_id, asker):
            await self._exchange(lambda client: wire.outcome(
                client.session, state, "core", read_timeout_s=math.inf), timeout, asker.alive)

    async def cancel_task(self, mcp_task_id: str) -> None:
        """``tasks/cancel``: ask the server to stop its task."""
        await self._task_request(lambda client, timeout: wire.cancel_task(
            client.session, mcp_task_id, read_timeout_s=timeout))

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
        if isinstance(exc, MCPError) and exc.error.message.startswith("SSE stream failed"):
            return results.failure(
                results.PROTOCOL, name, tool,
                f"the server's answer was larger than the {SSE_EVENT_LIMIT // 2**20} MiB an "
                f"answer may be, and was dropped whole ({exc.error.message})")
        if isinstance(exc, MCPError):
            return results.failure(results.PROTOCOL, name, tool, exc.error.message,
                                   code=exc.code)
        if isinstance(exc, ValidationError):
            return results.failure(results.PROTOCOL, name, tool,
                                   "the server's answer is not a valid result")
        if isinstance(exc, RuntimeError | TypeError | ValueError):  # an answer it cannot take
            return results.failure(results.PROTOCOL, name, tool, str(exc))
        raise exc


def _handler(connection: MCPConnection, tool: str, *, offers_background: bool) -> Any:
    async def handle(context: ToolContext, arguments: Mapping[str, Any]) -> ToolOutput:
        arguments = dict(arguments)
        asked = bool(arguments.pop("background", False)) if offers_background else False
        tasks = connection.tasks
        support = connection.task_support(tool)
        wanted = asked or context.background or (
            support == "required" and connection.wire == "extension")
        if wanted and tasks is not None and support != "forbidden":
            return await tasks.start(context, connection, tool, arguments)
        return await connection.call(tool, arguments, ids=context)
    return handle


async def _list_tools(client: Client) -> tuple[list[MCPTool], dict[str, str]]:
    """The server's tools, each read on its own: one malformed tool is set apart (with why),
    never the whole listing."""
    tools: list[MCPTool] = []
    malformed: dict[str, str] = {}
    cursor: str | None = None
    for _ in range(_LIST_PAGES):
        page = await _raw_list(client, cursor)
        valid: list[MCPTool] = []
        for raw in page.get("tools") or []:
            try:
                valid.append(MCPTool.model_validate(raw, by_name=False))
            except ValidationError as exc:
                name = raw.get("name") if isinstance(raw, Mapping) else None
                first = exc.errors()[0]
                where = ".".join(str(part) for part in first["loc"])
                malformed[str(name or "?")] = f"its listing is not valid: {where}: {first['msg']}"
        # The session learns the sound tools as its own listing would teach it (their output
        # schemas, their headers): else its first call lists them again, whole, and one
        # malformed tool fails every call.
        absorbed = client.session._absorb_tool_listing(ListToolsResult(tools=list(valid)),
                                                       complete=False).tools
        for tool in valid:
            if tool not in absorbed:
                malformed[tool.name] = "its listing is not valid: an invalid x-mcp-header"
        tools.extend(absorbed)
        cursor = page.get("nextCursor")
        if not isinstance(cursor, str):
            break
    return tools, malformed


async def _raw_list(client: Client, cursor: str | None) -> dict[str, Any]:
    """One page of ``tools/list``, as the server sent it (the SDK's own request validates the
    whole page as one, so one malformed tool would fail every tool)."""
    return await wire.raw_request(
        client.session, {"method": "tools/list", "params": {"cursor": cursor} if cursor else {}},
        read_timeout_s=client.session._session_read_timeout_seconds)


@contextlib.asynccontextmanager
async def _watched(server: MCPServer, lose: Callable[[str], None],
                   refuse: Callable[[int, str], None],
                   tokens: oauth.SealedTokens | None = None) -> AsyncIterator[Any]:
    """The SDK's transport for ``server``, its read side watched: the end of what the server
    sends (a subprocess that exited, a stream that closed) marks the connection lost, and an
    HTTP server's 401 or 403 (or an OAuth authorization that failed) marks it refused."""
    async with contextlib.AsyncExitStack() as stack:
        if server.url is not None:
            http = await stack.enter_async_context(create_mcp_http_client(
                headers=dict(server.headers) or None,
                auth=oauth.Guard(refuse, None if tokens is None else oauth.provider(tokens))))
            transport: Any = streamable_http_client(server.url, http_client=http,
                                                    max_sse_event_size=SSE_EVENT_LIMIT)
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
