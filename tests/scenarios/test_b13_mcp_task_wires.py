"""B13: background MCP calls as durable tasks on both wires, against servers no one here wrote.

- The oven (tests/mcp_servers/oven.py) is written with FastMCP and ``fastmcp-tasks``: the tasks
  extension of the 2026-07-28 revision, where the server answers a flat ``CreateTaskResult``
  and ``tasks/get`` carries the result inline.
- ``@modelcontextprotocol/server-everything`` (npm, the TypeScript SDK) speaks core tasks of the
  2025-11-25 revision: a task-augmented ``tools/call`` answered ``{"task": {...}}``, then
  ``tasks/get`` and ``tasks/result``; its ``simulate-research-query`` requires tasks, its other
  tools forbid them.
- The kettle (tests/mcp_servers/slow_tasks.py, the official ``mcp`` SDK's server) in its core
  mode: a handshake-era server whose tasks outlive it (they are kept in a file), its tool's
  body counted -- the one the crash tests can kill a tidings process beside.

(The kettle on the extension's wire is test_b5_mcp_tasks.py's.)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import RuntimeFactory
from tests.mcp_servers import KETTLE, everything_stdio, kettle_env, kettle_stdio, oven_stdio
from tests.mcp_servers.loopback import served
from tests.waiting import eventually
from tidings import MCPServer, Profile, Rule, ScriptedModel
from tidings.runtime.root import Runtime, RuntimeConfig
from tidings.tasks.journal import TaskRecord
from tidings.tasks.notify import NOTIFICATION_KIND, TaskState
from tidings.types import Message

WAIT = 60.0
STARTED = "Started."
TOLD = "Told of its end."


def model(tool: str, arguments: dict[str, Any]) -> ScriptedModel:
    return ScriptedModel(rules=[
        Rule({"text_equals": "go"}, {"tool_calls": [{"name": tool, "arguments": arguments}]}),
        Rule({"tool_result": tool}, {"text": STARTED}),
        Rule({"meta_kind": NOTIFICATION_KIND}, {"text": TOLD}),
    ], default={"text": "ok"})


async def runtime(runtimes: RuntimeFactory, server: MCPServer, tool: str,
                  arguments: dict[str, Any]) -> Runtime:
    return await runtimes(models=[model(tool, arguments)],
                          config=RuntimeConfig(mcp_servers=(server,)))


async def called(rt: Runtime, tool: str, *, background: tuple[str, ...] = ()
                 ) -> tuple[str, Message]:
    """A conversation whose first turn called ``tool``: its id and the call's result."""
    conv = (await rt.create_conversation("alice", Profile(
        model="scripted", tools=(tool,), background=background))).conversation_id
    await rt.post(conv, "go")
    async with asyncio.timeout(WAIT):
        await rt.settle(conv)
    [result] = [m for m in await rt.transcript(conv) if m.role == "tool"]
    return conv, result


async def told(rt: Runtime, conv: str) -> list[Message]:
    """The transcript once the woken turn answered the task's notice."""
    async def transcript() -> list[Message]:
        await rt.settle(conv)
        return await rt.transcript(conv)
    return await eventually(transcript, lambda ms: bool(ms) and ms[-1].content == TOLD,
                            what="the answer to the task's notice", within_s=WAIT)


def notices(messages: list[Message]) -> list[Message]:
    return [m for m in messages if m.meta.get("kind") == NOTIFICATION_KIND]


def runs(state: Path) -> list[str]:
    log = state / "runs.log"
    return log.read_text().split() if log.exists() else []


RESEARCH = "everything.simulate-research-query"
POLL = timedelta(milliseconds=100)
"""Between two polls of a task (the default, 5 s, would be most of a test's time)."""


@dataclass(frozen=True)
class Wire:
    """A server on one wire, and one call of its tool that runs as a task."""

    server: Callable[[Path], MCPServer]
    tool: str
    arguments: dict[str, Any]
    answer: str
    """What the call's result says once its task ended."""
    offers_background: bool
    """Whether the tool offers a ``background`` argument (it may run either way)."""
    ready: str | None = None
    """The marker file (in the server's state) that ends the task; none: it ends on its own."""
    body: str | None = None
    """The line the server's ``runs.log`` shows each time the tool's body starts, if it counts."""

    def end(self, state: Path) -> None:
        if self.ready is not None:
            (state / self.ready).touch()

    def in_the_background(self) -> tuple[dict[str, Any], tuple[str, ...]]:
        """The call's arguments and the profile's background list that make it a task: the
        model's ``background`` argument where the tool offers it, else the profile's list."""
        if self.offers_background:
            return {**self.arguments, "background": True}, ()
        return self.arguments, (self.tool,)


WIRES = {
    # FastMCP + fastmcp-tasks: the flat CreateTaskResult, the result inline in tasks/get.
    "extension": Wire(lambda state: oven_stdio(state, task_poll=POLL), "oven.bake",
                      {"what": "bread"}, "baked bread", offers_background=True,
                      ready="bread.done", body="bread"),
    # server-everything: {"task": {...}}, then tasks/get and tasks/result; the tool requires it.
    "core": Wire(lambda _: everything_stdio(), RESEARCH, {"topic": "tides"},
                 "Research Report: tides", offers_background=False),
    # The kettle on core tasks: the same shapes from the Python SDK, the tool optional.
    "core-kettle": Wire(lambda state: kettle_stdio(state, wire="core", task_poll=POLL),
                        "kettle.brew", {"what": "tea"}, "brewed tea", offers_background=True,
                        ready="tea.done", body="tea"),
}
wires = pytest.mark.parametrize("wire", WIRES.values(), ids=WIRES.keys())


@wires
async def test_b13_a_background_call_is_a_durable_task_told_once_after_its_result(
    runtimes: RuntimeFactory, tmp_path: Path, wire: Wire,
) -> None:
    arguments, background = wire.in_the_background()
    rt = await runtime(runtimes, wire.server(tmp_path), wire.tool, arguments)
    conv, result = await called(rt, wire.tool, background=background)
    # The server's task shape was understood: a task, not "not a valid result".
    assert result.meta["is_error"] is False, result.content
    task_key = result.meta["task_key"]
    task = await rt.tasks.get(conv, task_key)
    assert task.state is TaskState.RUNNING or wire.ready is None  # (the core one is quick)
    assert f"{task.mcp_server}.{task.mcp_tool}" == wire.tool
    assert task.mcp_task_id == result.meta["mcp_task_id"]

    wire.end(tmp_path)
    messages = await told(rt, conv)
    [note] = notices(messages)
    assert note.seq > result.seq
    assert (note.meta["task_key"], note.meta["state"]) == (task_key, "exited")
    assert wire.answer in note.content  # the result: inline, or read with tasks/result
    await rt.settle(conv)
    assert len(notices(await rt.transcript(conv))) == 1
    if wire.body is not None:
        assert runs(tmp_path) == [wire.body]  # the tool's body ran once


@wires
async def test_b13_a_call_in_the_foreground_is_followed_to_its_end(
    runtimes: RuntimeFactory, tmp_path: Path, wire: Wire,
) -> None:
    wire.end(tmp_path)
    rt = await runtime(runtimes, wire.server(tmp_path), wire.tool, wire.arguments)
    tool = rt.tools.get(wire.tool)
    assert tool is not None  # offered: tidings runs it as a task when it must
    assert ("background" in tool.parameters["properties"]) is wire.offers_background
    conv, result = await called(rt, wire.tool)
    assert result.meta["is_error"] is False, result.content
    assert wire.answer in result.content
    assert "task_key" not in result.meta
    assert await rt.tasks.list(conv) == []


# -- the tasks extension (FastMCP + fastmcp-tasks) ---------------------------------------------


async def test_b13_extension_wire_a_task_whose_tool_failed_is_never_a_success(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    rt = await runtime(runtimes, oven_stdio(tmp_path, task_poll=POLL), "oven.bake",
                       {"what": "cake", "background": True})
    conv, result = await called(rt, "oven.bake")
    (tmp_path / "cake.fail").touch()
    [note] = notices(await told(rt, conv))
    # FastMCP ends the task "completed" with an error result: exit code 1, not a success.
    task = await rt.tasks.get(conv, result.meta["task_key"])
    assert (task.state, task.exit_code) == (TaskState.EXITED, 1)
    assert '"succeeded":false' in note.content
    assert "the oven broke" in note.content


async def test_b13_extension_wire_stopping_the_run_cancels_the_task_on_the_server(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    rt = await runtime(runtimes, oven_stdio(tmp_path, task_poll=POLL), "oven.bake",
                       {"what": "pie", "background": True})
    conv, result = await called(rt, "oven.bake")
    assert result.run_id is not None
    await eventually(lambda: asyncio.sleep(0, runs(tmp_path)), bool, what="the body started")
    await rt.runs.stop(conv, result.run_id)

    async def task() -> TaskRecord:
        return await rt.tasks.get(conv, result.meta["task_key"])
    ended = await eventually(task, lambda t: t.state.terminal, what="the task's end",
                             within_s=WAIT)
    assert ended.state is TaskState.KILLED
    assert (tmp_path / "pie.cancelled").exists()  # the server stopped the body
    await rt.settle(conv)
    assert notices(await rt.transcript(conv)) == []


# -- core tasks (@modelcontextprotocol/server-everything) --------------------------------------


async def test_b13_core_wire_a_tool_that_forbids_tasks_is_never_called_as_one(
    runtimes: RuntimeFactory,
) -> None:
    rt = await runtime(runtimes, everything_stdio(), "everything.get-sum", {"a": 2, "b": 3})
    tool = rt.tools.get("everything.get-sum")
    assert tool is not None
    assert "background" not in tool.parameters["properties"]
    conv, result = await called(rt, "everything.get-sum", background=("everything.get-sum",))
    assert "5" in result.content
    assert "task_key" not in result.meta
    assert await rt.tasks.list(conv) == []


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_b13_core_wire_the_kettle_in_core_mode_is_heard_on_core_tasks(
    runtimes: RuntimeFactory, tmp_path: Path, transport: str,
) -> None:
    # The SDK's client probes server/discover first: the kettle answers as a handshake-era
    # server, so 2025-11-25 is negotiated and its tasks capability read.
    env = kettle_env(tmp_path, wire="core")
    with contextlib.ExitStack() as stack:
        server = (kettle_stdio(tmp_path, wire="core") if transport == "stdio"
                  else stack.enter_context(served(KETTLE, "kettle", env=env)))
        rt = await runtime(runtimes, server, "kettle.brew", {"what": "tea"})
        assert rt.mcp["kettle"].wire == "core"
        assert rt.mcp["kettle"].task_support("brew") == "optional"
        await runtimes.aclose()  # before the server it follows stops
