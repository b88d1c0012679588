"""MCP servers' tasks as background tasks of the runtime.

A tool call made in the background -- the profile lists the tool in ``background``, or the
model passes ``background: true`` -- goes to a server that runs tools as tasks as a
task-augmented call (:mod:`tidings.mcp.wire`). The server answers with its task at once; the
task is journalled like any background task, with the server's task id, and the call's result
tells the model the task key. From then on :class:`MCPTasks` follows the task on the server
until it ends, and its end is recorded exactly as a process's end is
(:meth:`~tidings.tasks.service.BackgroundTasks.record_end`): the same journal states, result
envelope and notification -- after the call's result, once, at a safe point.

What the server says decides the state: ``completed`` is ``exited`` (exit code 0, or 1 when its
result is an error), ``failed`` is ``failed``, ``cancelled`` is ``killed``; a task the server no
longer knows (it answers that the task id is invalid) is ``lost``, never a success. A server
that cannot be reached is waited for (its connection comes back); nothing is decided while it
is away.

After a crash, the runtime that reconciles the dead one adopts its MCP tasks (when it declares
their servers) and follows them by their stored ids. Stopping the run that started a task asks
the server to cancel it (``tasks/cancel``); its notification is withdrawn with the run's others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from tidings.mcp.asking import Asker, Asking
from tidings.mcp.declaration import MCPServer
from tidings.mcp.wire import TaskState as RemoteTask
from tidings.records.transcript import ConversationTx
from tidings.support.policy import backoff
from tidings.tasks import journal
from tidings.tasks.capture import CaptureBuffer
from tidings.tasks.notify import TaskState
from tidings.tasks.service import BackgroundTasks, TaskEnd
from tidings.tools.registry import ToolContext, ToolOutput
from tidings.types import ConversationId

log = logging.getLogger("tidings.mcp")

REFUSALS_BEFORE_LOST = 8
"""How many protocol errors in a row (other than "no such task") a task's server may answer
before its task is taken for lost: its outcome cannot be learnt."""
_RETRY_BASE = timedelta(milliseconds=200)
_RETRY_CAP = timedelta(seconds=30)


class TaskUnknownError(Exception):
    """The server does not know the task (any more): it is lost."""


class ServerUnreachableError(Exception):
    """The server cannot be asked now (not connected, or the connection broke)."""


class TaskRefusedError(Exception):
    """The server answered a protocol error about the task."""


class TaskServer(Protocol):
    """What following a task needs of its server's connection
    (:class:`~tidings.mcp.connection.MCPConnection` is one)."""

    server: MCPServer
    asking: Asking

    async def until_up(self) -> None: ...

    async def start_task(self, tool: str, arguments: Mapping[str, Any]) -> str | ToolOutput: ...

    async def task_status(self, mcp_task_id: str) -> RemoteStatus: ...

    async def task_output(self, state: RemoteTask, tool: str) -> ToolOutput: ...

    async def answer_task(self, state: RemoteTask, asker: Asker) -> None: ...

    async def cancel_task(self, mcp_task_id: str) -> None: ...


@dataclass(frozen=True, slots=True)
class RemoteStatus:
    """What a server says of one of its tasks."""

    status: str
    message: str | None
    poll: timedelta
    """How long to wait before asking again."""
    state: RemoteTask | None = None
    """The task as the server described it (its result, inline, on the tasks extension)."""

    @property
    def ended(self) -> bool:
        return self.status in ("completed", "failed", "cancelled")


@dataclass(frozen=True, slots=True)
class Followed:
    """A task followed on its server."""

    conversation_id: ConversationId
    task_key: str
    server: str
    tool: str
    mcp_task_id: str


class MCPTasks:
    """Follows the MCP tasks of this runtime, each to its end; a component of its lifetime."""

    def __init__(self, background: BackgroundTasks, connections: Mapping[str, TaskServer],
                 *, rng: random.Random | None = None) -> None:
        self.background = background
        self._connections = connections
        self._rng = rng or random.Random()
        self._followers: dict[str, asyncio.Task[None]] = {}
        self._wakes: dict[tuple[str, str], asyncio.Event] = {}
        self._cancels: set[asyncio.Task[None]] = set()
        self._stopping = False
        self._stopped = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        with contextlib.suppress(RuntimeError):
            self._loop = asyncio.get_running_loop()

    @property
    def name(self) -> str:
        return "tidings-mcp-tasks"

    def following(self) -> tuple[str, ...]:
        """The task keys followed now."""
        return tuple(self._followers)

    # -- starting -----------------------------------------------------------------------------

    async def start(self, context: ToolContext, connection: TaskServer, tool: str,
                    arguments: Mapping[str, Any]) -> ToolOutput:
        """Make the call as a task of ``connection``'s server and journal it; the model reads
        its task key. A server that answers the call at once gives its result, as a call in
        the foreground would; a refusal is the call's typed error."""
        starting = asyncio.ensure_future(connection.start_task(tool, arguments))
        try:
            started = await asyncio.shield(starting)
        except asyncio.CancelledError:
            # Stopped while the server may already have made the task (its answer is on the
            # way): the answer is still read, and a task nobody will follow is dropped there.
            starting.add_done_callback(lambda done: self._drop(connection, done))
            raise
        if isinstance(started, ToolOutput):
            return started
        server = connection.server.name
        try:
            task_key = await self.background.start_remote(
                context, server=server, tool=tool, mcp_task_id=started)
        except BaseException:
            # Not journalled, so nobody would follow it: the server is asked to drop it.
            self._spawn_cancel(connection, started)
            raise
        context.started.append(task_key)
        self._begin(Followed(context.conversation_id, task_key, server, tool, started))
        return ToolOutput(
            f"started background task {task_key} ({server}.{tool}, run by the MCP server as "
            f"its task {started}); you will be told when it ends",
            meta={"task_key": task_key, "lifetime": "conversation", "mcp_server": server,
                  "mcp_tool": tool, "mcp_task_id": started},
        )

    def _drop(self, connection: TaskServer, done: asyncio.Future[str | ToolOutput]) -> None:
        if done.cancelled() or done.exception() is not None:
            return
        started = done.result()
        if isinstance(started, str):
            log.info("MCP server %s: task %s was made for a call that was stopped meanwhile; "
                     "asking the server to cancel it", connection.server.name, started)
            self._spawn_cancel(connection, started)

    # -- following (adopted tasks come through BackgroundTasks.reconcile_lost) ----------------

    def follows(self, server: str) -> bool:
        return server in self._connections and not self._stopping

    def follow(self, task: journal.TaskRecord) -> None:
        assert task.mcp_server is not None
        assert task.mcp_task_id is not None
        self._begin(Followed(task.conversation_id, task.task_key, task.mcp_server,
                             task.mcp_tool or "", task.mcp_task_id))

    def wake(self, server: str, mcp_task_id: str) -> None:
        """The server said the task's status changed: ask about it now."""
        wake = self._wakes.get((server, mcp_task_id))
        if wake is not None:
            wake.set()

    def _begin(self, task: Followed) -> None:
        if self._stopping or task.task_key in self._followers:
            return
        self._wakes[(task.server, task.mcp_task_id)] = asyncio.Event()
        self._followers[task.task_key] = asyncio.create_task(
            self._follow(task), name=f"tidings-mcp-task {task.task_key}")

    async def _follow(self, task: Followed) -> None:
        try:
            end = await self._until_ended(task)
            await self.background.ends.record_end(task.conversation_id, task.task_key, end)
            await self._connections[task.server].asking.task_ended(task.conversation_id,
                                                                   task.task_key)
        except asyncio.CancelledError:
            raise  # the runtime is closing: the next one follows the task again
        except Exception:
            log.exception("following MCP task %s (task %s) failed", task.mcp_task_id,
                          task.task_key)
        finally:
            self._followers.pop(task.task_key, None)
            self._wakes.pop((task.server, task.mcp_task_id), None)

    async def _until_ended(self, task: Followed) -> TaskEnd:
        connection = self._connections[task.server]
        wake = self._wakes[(task.server, task.mcp_task_id)]
        refusals = unreachable = 0
        while True:
            try:
                await connection.until_up()
                now = await connection.task_status(task.mcp_task_id)
                if now.ended:
                    return await self._end(connection, task, now)
                refusals = unreachable = 0
                delay = now.poll
                if now.status == "input_required" and now.state is not None:
                    await self._answer(connection, task, now.state, wake)
                    continue
            except TaskUnknownError as exc:
                log.warning("MCP server %s no longer knows task %s (task %s): lost: %s",
                            task.server, task.mcp_task_id, task.task_key, exc)
                return _said(TaskState.LOST, f"the MCP server {task.server} no longer knows "
                             f"task {task.mcp_task_id}: its outcome is unknown")
            except TaskRefusedError as exc:
                refusals += 1
                if refusals >= REFUSALS_BEFORE_LOST:
                    return _said(TaskState.LOST, f"the MCP server {task.server} kept refusing to "
                                 f"say how task {task.mcp_task_id} goes: {exc}")
                delay = backoff(refusals, self._rng, base=_RETRY_BASE, cap=_RETRY_CAP)
            except ServerUnreachableError:
                unreachable += 1  # the connection is retried by its own loop; ask again then
                delay = backoff(unreachable, self._rng, base=_RETRY_BASE, cap=_RETRY_CAP)
            wake.clear()
            await self.background.clock.wait(wake, delay.total_seconds())

    async def _answer(self, connection: TaskServer, task: Followed, state: RemoteTask,
                      wake: asyncio.Event) -> None:
        """The task waits for input: a person of its conversation is asked (once, however
        often this is tried), and the answer sent. A wake (the task changed: cancelled, say)
        stops the wait; the task is asked about again, and the same question still waits."""
        asker = Asker(task.conversation_id, f"mcp:{task.server}:task:{task.mcp_task_id}",
                      task_id=task.task_key, alive=asyncio.Event())
        wake.clear()
        answering = asyncio.ensure_future(connection.answer_task(state, asker))
        woken = asyncio.ensure_future(wake.wait())
        try:
            await asyncio.wait({answering, woken}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            woken.cancel()
            if not answering.done():
                answering.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await answering
        if not answering.cancelled() and answering.exception() is not None:
            log.warning("MCP server %s: the input task %s waits for was not sent: %s",
                        task.server, task.mcp_task_id, answering.exception())
            await self.background.clock.sleep(_RETRY_BASE.total_seconds())

    async def _end(self, connection: TaskServer, task: Followed, now: RemoteStatus
                   ) -> TaskEnd:
        if now.status == "cancelled":
            return _said(TaskState.KILLED, now.message or "the MCP server cancelled the task")
        assert now.state is not None
        output = await connection.task_output(now.state, task.tool)
        text = output.content if output.content or not now.message else now.message
        limit = self.background.output_limit_bytes()
        if now.status == "failed":
            return _said(TaskState.FAILED, text, limit_bytes=limit)
        return _said(TaskState.EXITED, text, exit_code=1 if output.is_error else 0,
                     limit_bytes=limit)

    # -- cancelling ---------------------------------------------------------------------------

    def cancel_run(self, cx: ConversationTx, run_id: str) -> None:
        """A stopped run's tasks notify nothing more (M14) -- and its MCP tasks still running
        are cancelled on their servers once that is committed."""
        journal.cancel_run(cx, run_id)
        running = [t for t in journal.of_run(cx, run_id)
                   if t.state is TaskState.RUNNING and t.mcp_server in self._connections
                   and t.mcp_task_id is not None]
        loop = self._loop
        if running and loop is not None:
            def committed() -> None:
                # On the event loop: a unit may commit on the store's own thread.
                loop.call_soon_threadsafe(self._cancel, running)
            cx.tx.after_commit(committed)

    def _cancel(self, tasks: list[journal.TaskRecord]) -> None:
        for task in tasks:
            assert task.mcp_server is not None
            assert task.mcp_task_id is not None
            self._spawn_cancel(self._connections[task.mcp_server], task.mcp_task_id)

    def _spawn_cancel(self, connection: TaskServer, mcp_task_id: str) -> None:
        if self._stopping:
            return
        cancel = asyncio.create_task(self._cancel_one(connection, mcp_task_id))
        self._cancels.add(cancel)
        cancel.add_done_callback(self._cancels.discard)

    async def _cancel_one(self, connection: TaskServer, mcp_task_id: str) -> None:
        name = connection.server.name
        try:
            async with asyncio.timeout(connection.server.timeout.total_seconds()):
                await connection.until_up()
                await connection.cancel_task(mcp_task_id)
        except (TimeoutError, ServerUnreachableError, TaskRefusedError, TaskUnknownError) as exc:
            log.warning("MCP server %s: could not cancel task %s: %s", name, mcp_task_id,
                        exc or type(exc).__name__)
            return
        self.wake(name, mcp_task_id)  # its follower records how it ended

    # -- the component ------------------------------------------------------------------------

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self._stopped.wait()

    async def shutdown(self) -> None:
        """Stop following (the tasks stay running in the journal: the next runtime on the
        database follows them again). Idempotent."""
        if self._stopping:
            return
        self._stopping = True
        work = [*self._followers.values(), *self._cancels]
        for item in work:
            item.cancel()
        if work:
            await asyncio.gather(*work, return_exceptions=True)
        self._stopped.set()


def _said(state: TaskState, text: str, *, exit_code: int | None = None,
          limit_bytes: int = 2 * 1024 * 1024) -> TaskEnd:
    """An end whose output is what the server said, bounded as a process's output is (its head
    and tail beyond ``limit_bytes``, the rest counted)."""
    kept = CaptureBuffer(limit_bytes)
    kept.feed_stdout(text.encode("utf-8", "replace"))
    return TaskEnd(state, exit_code=exit_code, stdout=kept.stdout())


__all__ = ("MCPTasks", "RemoteStatus", "ServerUnreachableError", "TaskRefusedError",
           "TaskUnknownError")
