"""B13 across a SIGKILL: a background MCP call's task, on either tasks wire, outlives the tidings
process that started it.

The server runs on loopback HTTP, apart from tidings, so its task runs on while the process
that started it is killed: on the tasks extension's wire, the oven (tests/mcp_servers/oven.py,
FastMCP + ``fastmcp-tasks``); on core tasks (2025-11-25), the kettle in its core mode
(tests/mcp_servers/slow_tasks.py, the official ``mcp`` SDK's server). A runtime
started afterwards on the same database follows that very task by its stored id -- the body
ran once -- and its end reaches the conversation as one notice, after the call's result, read
by one turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

from tests.conftest import Backend
from tests.crash.helpers import spawn_script, wait_instance_released
from tests.mcp_servers import KETTLE, OVEN, kettle_env
from tests.mcp_servers.loopback import served
from tests.waiting import eventually
from tidings import MCPServer, Rule, ScriptedModel
from tidings.runtime.root import Runtime, RuntimeConfig
from tidings.tasks.notify import NOTIFICATION_KIND, TaskState
from tidings.types import Message, RunStatus, StartKind

CHILD = Path(__file__).with_name("mcp_task_child.py")
TOLD = "Told of its end."
WAIT = 15.0
POLL = timedelta(milliseconds=100)


def runs(state: Path) -> list[str]:
    """The bodies the oven started, one line each."""
    log = state / "runs.log"
    return log.read_text().split() if log.exists() else []


def notices(messages: list[Message]) -> list[Message]:
    return [m for m in messages if m.meta.get("kind") == NOTIFICATION_KIND]


@contextlib.asynccontextmanager
async def restarted(backend: Backend, server: MCPServer) -> AsyncIterator[Runtime]:
    model = ScriptedModel(rules=[Rule({"meta_kind": NOTIFICATION_KIND}, {"text": TOLD})],
                          default={"text": "ok"})
    async with Runtime.open(backend.url, models=[model],
                            config=RuntimeConfig(mcp_servers=(server,))) as rt:
        yield rt


async def killed_while_running(backend: Backend, server: MCPServer, tool: str,
                               arguments: dict[str, object], running: Path) -> dict[str, str]:
    """A child runtime calls ``tool`` in the background and is SIGKILLed once the server's
    task runs (``running`` exists): what it announced of the task."""
    declared = json.dumps({"name": server.name, "url": server.url})
    async with spawn_script(CHILD, backend.url, declared, tool, json.dumps(arguments)) as child:
        started = await child.checkpoint("started", within_s=WAIT)
        await eventually(lambda: asyncio.sleep(0, running.exists()), bool,
                         what="the server's task running", within_s=WAIT)
        await child.kill()  # SIGKILL: no shutdown code runs
    await wait_instance_released(backend.url, started["instance_id"])
    return started


async def a_sigkill_while_the_task_runs_follows_the_same_task(
    backend: Backend, server: MCPServer, state: Path, tool: str, what: str, answer: str,
) -> None:
    """``tool`` called with ``what`` in the background by a child that is SIGKILLed while the
    server's task runs (its body logged in ``state``/runs.log, ended by ``<what>.done``), then
    followed by a new runtime: the same task, its body run once, its end ``answer`` told once
    after the call's result, read by one turn."""
    left = await killed_while_running(backend, server, tool, {"what": what}, state / "runs.log")
    conv, task_key = left["conversation_id"], left["task_key"]
    async with restarted(backend, server) as rt:
        async def adopted() -> TaskState:
            task = await rt.tasks.get(conv, task_key)
            return task.state if task.instance_id == rt.instance_id else TaskState.LOST
        # Followed again by the new process while it still runs on the server.
        assert await eventually(adopted, lambda s: s is TaskState.RUNNING,
                                what="the task followed again", within_s=WAIT) \
            is TaskState.RUNNING
        (state / f"{what}.done").touch()

        async def transcript() -> list[Message]:
            await rt.settle(conv)
            return await rt.transcript(conv)
        messages = await eventually(transcript,
                                    lambda ms: bool(ms) and ms[-1].content == TOLD,
                                    what="the answer to the task's notice", within_s=WAIT)
        task = await rt.tasks.get(conv, task_key)
        history = await rt.runs.list(conv)

    assert runs(state) == [what]  # the body ran once: the same server task was followed
    assert task.mcp_task_id == left["mcp_task_id"]
    [result] = [m for m in messages if m.role == "tool"]
    [note] = notices(messages)
    assert result.meta["task_key"] == note.meta["task_key"] == task_key
    assert result.seq < note.seq  # the call's result first, then the notice
    assert (note.meta["state"], note.meta["event_id"]) == ("exited", task.event_id)
    assert answer in note.content
    assert (task.state, task.exit_code, task.delivered, task.consumed) == (
        TaskState.EXITED, 0, True, True)
    assert task.notification_seq == note.seq
    # One turn started the task (in the killed process), one read its notice.
    assert [(r.trigger, r.status) for r in history] == [
        (StartKind.PERSON, RunStatus.COMPLETED), (StartKind.WAKE, RunStatus.COMPLETED)]


async def test_b13_extension_wire_a_sigkill_while_the_task_runs_follows_the_same_task(
    backend: Backend, tmp_path: Path,
) -> None:
    with served(OVEN, "oven", env={"OVEN_DIR": str(tmp_path), "FASTMCP_LOG_LEVEL": "ERROR"},
                task_poll=POLL) as oven:
        await a_sigkill_while_the_task_runs_follows_the_same_task(
            backend, oven, tmp_path, "oven.bake", "bread", "baked bread")


async def test_b13_core_wire_a_sigkill_while_the_task_runs_follows_the_same_task(
    backend: Backend, tmp_path: Path,
) -> None:
    # The kettle in core mode: 2025-11-25 negotiated, a task-augmented tools/call answered
    # {"task": {...}}, then tasks/get and tasks/result; its tasks kept in a file.
    with served(KETTLE, "kettle", env=kettle_env(tmp_path, wire="core"),
                task_poll=POLL) as kettle:
        await a_sigkill_while_the_task_runs_follows_the_same_task(
            backend, kettle, tmp_path, "kettle.brew", "tea", "brewed tea")
