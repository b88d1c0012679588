"""B13: background MCP calls as durable tasks on both wires, against servers no one here wrote.

- The oven (tests/mcp_servers/oven.py) is written with FastMCP and ``fastmcp-tasks``: the tasks
  extension of the 2026-07-28 revision, where the server answers a flat ``CreateTaskResult``
  and ``tasks/get`` carries the result inline.
- ``@modelcontextprotocol/server-everything`` (npm, the TypeScript SDK) speaks core tasks of the
  2025-11-25 revision: a task-augmented ``tools/call`` answered ``{"task": {...}}``, then
  ``tasks/get`` and ``tasks/result``; its ``simulate-research-query`` requires tasks, its other
  tools forbid them.

(The official Python SDK's servers are the kettle's, in test_b5_mcp_tasks.py.)
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.conftest import RuntimeFactory
from tests.mcp_servers import everything_stdio, oven_stdio
from tests.waiting import eventually
from tidings import MCPServer, Profile, Rule, ScriptedModel
from tidings.runtime import Runtime, RuntimeConfig
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


# -- the tasks extension (FastMCP + fastmcp-tasks) ---------------------------------------------


async def test_b13_extension_wire_a_background_call_is_a_task_told_once_after_its_result(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    rt = await runtime(runtimes, oven_stdio(tmp_path), "oven.bake",
                       {"what": "bread", "background": True})
    conv, result = await called(rt, "oven.bake")
    # The flat CreateTaskResult was understood: a task, not "not a valid result".
    assert result.meta["is_error"] is False, result.content
    task_key = result.meta["task_key"]
    task = await rt.tasks.get(conv, task_key)
    assert (task.state, task.mcp_server, task.mcp_tool) == (TaskState.RUNNING, "oven", "bake")
    assert task.mcp_task_id == result.meta["mcp_task_id"]

    (tmp_path / "bread.done").touch()
    messages = await told(rt, conv)
    [note] = notices(messages)
    assert note.seq > result.seq
    assert (note.meta["task_key"], note.meta["state"]) == (task_key, "exited")
    assert "baked bread" in note.content  # the result, inline in tasks/get
    await rt.settle(conv)
    assert len(notices(await rt.transcript(conv))) == 1
    assert runs(tmp_path) == ["bread"]  # the tool's body ran once


async def test_b13_extension_wire_a_task_whose_tool_failed_is_never_a_success(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    rt = await runtime(runtimes, oven_stdio(tmp_path), "oven.bake",
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
    rt = await runtime(runtimes, oven_stdio(tmp_path), "oven.bake",
                       {"what": "pie", "background": True})
    conv, result = await called(rt, "oven.bake")
    assert result.run_id is not None
    await eventually(lambda: asyncio.sleep(0, runs(tmp_path)), bool, what="the body started")
    await rt.stop_run(conv, result.run_id)

    async def task() -> TaskRecord:
        return await rt.tasks.get(conv, result.meta["task_key"])
    ended = await eventually(task, lambda t: t.state.terminal, what="the task's end",
                             within_s=WAIT)
    assert ended.state is TaskState.KILLED
    assert (tmp_path / "pie.cancelled").exists()  # the server stopped the body
    await rt.settle(conv)
    assert notices(await rt.transcript(conv)) == []


async def test_b13_extension_wire_a_call_in_the_foreground_is_followed_to_its_end(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    (tmp_path / "scone.done").touch()
    rt = await runtime(runtimes, oven_stdio(tmp_path), "oven.bake", {"what": "scone"})
    conv, result = await called(rt, "oven.bake")
    assert result.content == "baked scone"
    assert "task_key" not in result.meta
    assert await rt.tasks.list(conv) == []


# -- core tasks (@modelcontextprotocol/server-everything) --------------------------------------

RESEARCH = "everything.simulate-research-query"


async def test_b13_core_wire_a_tool_that_requires_tasks_is_called_as_one_in_the_foreground(
    runtimes: RuntimeFactory,
) -> None:
    rt = await runtime(runtimes, everything_stdio(), RESEARCH, {"topic": "tides"})
    tool = rt.tools.get(RESEARCH)
    assert tool is not None  # offered: tidings runs it as a task
    assert "background" not in tool.parameters["properties"]  # it is always one
    conv, result = await called(rt, RESEARCH)
    assert result.meta["is_error"] is False, result.content
    assert "Research Report: tides" in result.content
    assert await rt.tasks.list(conv) == []


async def test_b13_core_wire_a_background_call_is_a_durable_task_told_once(
    runtimes: RuntimeFactory,
) -> None:
    rt = await runtime(runtimes, everything_stdio(), RESEARCH, {"topic": "tides"})
    conv, result = await called(rt, RESEARCH, background=(RESEARCH,))
    assert result.meta["is_error"] is False, result.content
    task = await rt.tasks.get(conv, result.meta["task_key"])
    assert (task.mcp_server, task.mcp_tool) == ("everything", "simulate-research-query")
    [note] = notices(await told(rt, conv))
    assert (note.meta["task_key"], note.meta["state"]) == (task.task_key, "exited")
    assert "Research Report: tides" in note.content  # read with tasks/result
    await rt.settle(conv)
    assert len(notices(await rt.transcript(conv))) == 1


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
