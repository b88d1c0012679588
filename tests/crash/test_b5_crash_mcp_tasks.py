"""B5 across a crash: a runtime killed with SIGKILL while an MCP server's task it started runs,
then restarted on the same database.

The task's work runs on the server, not in the dead runtime: the restarted runtime follows it
again by the task id stored with it, and its end reaches the model once, as a task notice after
the call's result. A task the server forgot meanwhile is ``lost``, and so is one whose server
the restarted runtime does not declare -- never a success.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from tests.conftest import Backend
from tests.crash.helpers import Child, wait_instance_released
from tests.mcp_servers import KETTLE, kettle_requests, kettle_stdio
from tests.waiting import eventually
from tidings.models.scripted import Rule, ScriptedModel
from tidings.runtime.root import Runtime, RuntimeConfig
from tidings.store import open_store
from tidings.tasks.journal import TaskRecord, task_from_row
from tidings.tasks.notify import NOTIFICATION_KIND, TaskState
from tidings.types import Message

CHILD = """
import asyncio, json, sys
from tidings import MCPServer, Profile, Rule, Runtime, RuntimeConfig, ScriptedModel

MODEL = ScriptedModel(rules=[
    Rule({"text_equals": "brew"}, {"tool_calls": [{"name": "kettle.brew",
        "arguments": {"what": "tea", "background": True}}]}),
    Rule({"tool_result": "kettle.brew"}, {"text": "The tea is brewing."}),
])

async def main() -> None:
    kettle = MCPServer("kettle", command=[sys.executable, sys.argv[3]],
                       env={"SLOW_TASKS_DIR": sys.argv[2]})
    config = RuntimeConfig(mcp_servers=(kettle,))
    async with Runtime.open(sys.argv[1], models=[MODEL], config=config) as rt:
        conv = (await rt.create_conversation(
            "alice", Profile(model="scripted", tools=("kettle.brew",)))).conversation_id
        await rt.post(conv, "brew")
        await rt.settle(conv)
        [task] = await rt.tasks.list(conv)
        print(json.dumps({"checkpoint": "brewing", "conversation_id": conv,
                          "instance_id": rt.instance_id, "task_key": task.task_key}),
              flush=True)
        await asyncio.sleep(3600)

asyncio.run(main())
"""

READY = "Told about the tea."
RESTARTED = ScriptedModel(rules=[Rule({"meta_kind": NOTIFICATION_KIND}, {"text": READY})],
                          default={"text": "ok"})


@contextlib.asynccontextmanager
async def brewing_child(url: str, state: Path) -> AsyncIterator[Child]:
    """A runtime process whose turn started the kettle's task; SIGKILLed and reaped on exit."""
    fd, name = tempfile.mkstemp(prefix="tidings-b5-child-", suffix=".stderr")
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", CHILD, url, str(state), str(KETTLE),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=fd)
    finally:
        os.close(fd)
    child = Child(proc, Path(name))
    try:
        yield child
    finally:
        await child.kill()
        if proc.stdout is not None:
            await proc.stdout.read()
        child.forget()


async def killed_while_brewing(backend: Backend, state: Path) -> tuple[str, TaskRecord]:
    """Start the task in a child runtime and SIGKILL it while the task runs on the server:
    the conversation and the task as the dead runtime left it."""
    async with brewing_child(backend.url, state) as child:
        brewing = await child.checkpoint("brewing")
        await child.kill()  # SIGKILL: no shutdown code runs
    conv, task_key = brewing["conversation_id"], brewing["task_key"]
    await wait_instance_released(backend.url, brewing["instance_id"])
    store = await open_store(backend.url)
    try:
        row = await store.read(lambda tx: tx.one("get_task", conversation_id=conv,
                                                  task_key=task_key))
    finally:
        await store.close()
    assert row is not None
    return conv, task_from_row(row)


async def answered(rt: Runtime, conv: str, answer: str) -> list[Message]:
    async def transcript() -> list[Message]:
        await rt.settle(conv)
        return await rt.transcript(conv)
    return await eventually(transcript, lambda ms: bool(ms) and ms[-1].content == answer,
                            what=f"the answer {answer!r}", within_s=60)


def notices(messages: list[Message]) -> list[Message]:
    return [m for m in messages if m.meta.get("kind") == NOTIFICATION_KIND]


def restarted(backend: Backend, state: Path, *, declared: bool = True
              ) -> contextlib.AbstractAsyncContextManager[Runtime]:
    servers = (kettle_stdio(state),) if declared else ()
    return Runtime.open(backend.url, models=[RESTARTED],
                        config=RuntimeConfig(mcp_servers=servers))


async def test_b5_after_a_kill_the_restarted_runtime_follows_the_stored_task_id(
    backend: Backend, tmp_path: Path,
) -> None:
    conv, left = await killed_while_brewing(backend, tmp_path)
    # The dead runtime left the task running, with the MCP task id it was given.
    assert left.state is TaskState.RUNNING
    assert (left.mcp_server, left.mcp_tool) == ("kettle", "brew")
    [(first_server, _, created)] = [r for r in kettle_requests(tmp_path) if r[1] == "tools/call"]
    assert left.mcp_task_id == created

    async with restarted(backend, tmp_path) as rt:
        # The restarted runtime -- through a new server process -- asks about that very task.
        await eventually(lambda: asyncio.sleep(0, kettle_requests(tmp_path)),
                         lambda asked: any(pid != first_server and m == "tasks/get"
                                           and t == created for pid, m, t in asked),
                         what="the restarted runtime asking about the stored task id")
        adopted = await rt.tasks.get(conv, left.task_key)
        assert (adopted.state, adopted.instance_id) == (TaskState.RUNNING, rt.instance_id)

        (tmp_path / "tea.done").touch()  # the task ends after the restart
        messages = await answered(rt, conv, READY)
        [note] = notices(messages)
        [result] = [m for m in messages if m.role == "tool"]
        assert note.seq > result.seq
        assert result.meta["task_key"] == note.meta["task_key"] == left.task_key
        assert note.meta["state"] == "exited"
        assert '"succeeded":true' in note.content
        assert "brewed tea" in note.content
        task = await rt.tasks.get(conv, left.task_key)
        assert (task.state, task.exit_code, task.delivered, task.consumed) == (
            TaskState.EXITED, 0, True, True)

    # A second restart finds nothing more to say.
    async with restarted(backend, tmp_path) as again:
        await asyncio.wait_for(again.settle(conv), 30)
        assert len(notices(await again.transcript(conv))) == 1


async def test_b5_a_task_the_server_forgot_while_the_runtime_was_dead_is_lost(
    backend: Backend, tmp_path: Path,
) -> None:
    conv, left = await killed_while_brewing(backend, tmp_path)
    (tmp_path / "tea.forget").touch()
    async with restarted(backend, tmp_path) as rt:
        [note] = notices(await answered(rt, conv, READY))
        assert note.meta["task_key"] == left.task_key
        assert note.meta["state"] == "lost"
        assert '"succeeded":false' in note.content
        assert (await rt.tasks.get(conv, left.task_key)).state is TaskState.LOST


async def test_b5_a_task_whose_server_the_restarted_runtime_lacks_is_lost(
    backend: Backend, tmp_path: Path,
) -> None:
    conv, left = await killed_while_brewing(backend, tmp_path)
    async with restarted(backend, tmp_path, declared=False) as rt:
        [note] = notices(await answered(rt, conv, READY))
        assert note.meta["task_key"] == left.task_key
        assert note.meta["state"] == "lost"
        assert '"succeeded":false' in note.content
