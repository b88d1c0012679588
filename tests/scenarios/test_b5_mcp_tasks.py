"""B5: an MCP server's task as a background task of the runtime, against a real SDK server.

The kettle server (tests/mcp_servers/slow_tasks.py) runs its tool as a task when asked to, and
the task ends only when the test drops a marker file -- long after the turn that started it.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.conftest import RuntimeFactory
from tests.mcp_servers import LONG, kettle_requests, kettle_stdio
from tests.waiting import eventually
from tidings import InvalidInputError, MCPServer, Profile, Rule, ScriptedModel
from tidings.runtime.root import Runtime, RuntimeConfig
from tidings.tasks.journal import TaskRecord
from tidings.tasks.notify import NOTIFICATION_KIND, TaskState
from tidings.types import Message, RunStatus, StartKind

WAIT = 60.0
STARTED = "The tea is brewing."
READY = "Told about the tea."


def kettle_model(arguments: dict[str, object]) -> ScriptedModel:
    return ScriptedModel(rules=[
        Rule({"text_equals": "brew"},
             {"tool_calls": [{"name": "kettle.brew", "arguments": arguments}]}),
        Rule({"tool_result": "kettle.brew"}, {"text": STARTED}),
        Rule({"meta_kind": NOTIFICATION_KIND}, {"text": READY}),
    ], default={"text": "ok"})


async def kettle_runtime(runtimes: RuntimeFactory, state: Path,
                         arguments: dict[str, object], server: MCPServer | None = None,
                         ) -> Runtime:
    server = server or kettle_stdio(state)
    return await runtimes(models=[kettle_model(arguments)],
                          config=RuntimeConfig(mcp_servers=(server,)))


async def brewing(rt: Runtime, *, background: tuple[str, ...] = ()) -> tuple[str, Message]:
    """A conversation whose first turn called ``kettle.brew``: its id and the call's result."""
    conv = (await rt.create_conversation("alice", Profile(
        model="scripted", tools=("kettle.brew",), background=background))).conversation_id
    await rt.post(conv, "brew")
    async with asyncio.timeout(WAIT):
        await rt.settle(conv)
    [result] = [m for m in await rt.transcript(conv) if m.role == "tool"]
    return conv, result


async def answered(rt: Runtime, conv: str, answer: str) -> list[Message]:
    async def transcript() -> list[Message]:
        await rt.settle(conv)
        return await rt.transcript(conv)
    return await eventually(transcript, lambda ms: bool(ms) and ms[-1].content == answer,
                            what=f"the answer {answer!r}", within_s=WAIT)


def notices(messages: list[Message]) -> list[Message]:
    return [m for m in messages if m.meta.get("kind") == NOTIFICATION_KIND]


async def test_b5_a_background_call_is_a_task_whose_key_the_model_reads(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    rt = await kettle_runtime(runtimes, tmp_path, {"what": "tea", "background": True})
    tool = rt.tools.get("kettle.brew")
    assert tool is not None
    assert tool.parameters["properties"]["background"]["type"] == "boolean"

    conv, result = await brewing(rt)
    task_key = result.meta["task_key"]
    assert f"started background task {task_key}" in result.content
    assert result.meta["is_error"] is False
    task = await rt.tasks.get(conv, task_key)
    # The MCP task id is stored with the task, and the server was asked for exactly that task.
    assert (task.state, task.mcp_server, task.mcp_tool) == (TaskState.RUNNING, "kettle", "brew")
    assert task.mcp_task_id == result.meta["mcp_task_id"]
    assert ("tools/call", task.mcp_task_id) in [(m, t) for _, m, t in kettle_requests(tmp_path)]
    assert task.committed
    assert notices(await rt.transcript(conv)) == []  # the task has not ended: nothing to tell


async def test_b5_the_end_is_a_task_notice_once_after_the_result(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    rt = await kettle_runtime(runtimes, tmp_path, {"what": "tea", "background": True})
    conv, result = await brewing(rt)
    task_key = result.meta["task_key"]

    (tmp_path / "tea.done").touch()  # the task ends, well after the turn
    messages = await answered(rt, conv, READY)
    [note] = notices(messages)
    assert note.seq > result.seq
    assert note.meta["task_key"] == task_key
    assert note.meta["state"] == "exited"
    assert note.meta["mcp_server"] == "kettle"
    assert '"succeeded":true' in note.content
    assert "brewed tea" in note.content  # the task's result, fenced as untrusted output
    task = await rt.tasks.get(conv, task_key)
    assert (task.state, task.exit_code, task.delivered, task.consumed) == (
        TaskState.EXITED, 0, True, True)
    assert note.meta["event_id"] == task.event_id
    runs = await rt.runs.list(conv)
    assert [(r.trigger, r.status) for r in runs] == [
        (StartKind.PERSON, RunStatus.COMPLETED), (StartKind.WAKE, RunStatus.COMPLETED)]
    asked = [m for _, m, t in kettle_requests(tmp_path) if t == task.mcp_task_id]
    assert "tasks/get" in asked  # the result came inline

    # Nothing more is told, however long the runtime runs on.
    await rt.settle(conv)
    assert len(notices(await rt.transcript(conv))) == 1
    assert task_key not in rt.mcp.tasks.following()  # type: ignore[union-attr]


async def test_b5_the_servers_status_notification_asks_about_the_task_at_once(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    # Neither the server's suggested interval nor the runtime's cap would ask again during
    # the test: only notifications/tasks/status can bring the task's end in time.
    server = kettle_stdio(tmp_path, poll_ms=3_600_000, task_poll=LONG)
    rt = await kettle_runtime(runtimes, tmp_path, {"what": "tea", "background": True}, server)
    conv, result = await brewing(rt)
    (tmp_path / "tea.done").touch()
    [note] = notices(await answered(rt, conv, READY))
    assert note.meta["task_key"] == result.meta["task_key"]


async def test_b5_the_profile_marks_a_tool_as_background(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    rt = await kettle_runtime(runtimes, tmp_path, {"what": "coffee"})
    conv, result = await brewing(rt, background=("kettle.brew",))
    task = await rt.tasks.get(conv, result.meta["task_key"])
    assert task.state is TaskState.RUNNING
    (tmp_path / "coffee.done").touch()
    [note] = notices(await answered(rt, conv, READY))
    assert note.meta["task_key"] == task.task_key


async def test_b13_a_call_in_the_foreground_the_server_runs_as_a_task_is_followed_within_it(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    # On the extension's wire the server decides: it runs the call as a task. A call in the
    # foreground is followed to its end within the call, and its result is the call's.
    rt = await kettle_runtime(runtimes, tmp_path, {"what": "tea"})

    async def ready_soon() -> None:
        await eventually(lambda: asyncio.sleep(0, kettle_requests(tmp_path)),
                         lambda asked: any(m == "tools/call" for _, m, _ in asked),
                         what="the call", within_s=WAIT)
        (tmp_path / "tea.done").touch()

    ready = asyncio.ensure_future(ready_soon())
    conv, result = await brewing(rt)
    await ready
    assert result.content == "brewed tea"
    assert "task_key" not in result.meta
    assert await rt.tasks.list(conv) == []
    assert "tasks/get" in [m for _, m, _ in kettle_requests(tmp_path)]


async def test_b5_a_profile_cannot_mark_a_tool_it_does_not_offer(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    rt = await kettle_runtime(runtimes, tmp_path, {"what": "tea"})
    with pytest.raises(InvalidInputError, match="background"):
        await rt.create_conversation("alice", Profile(
            model="scripted", tools=("kettle.brew",), background=("shell",)))


async def test_b5_a_task_that_failed_on_the_server_is_told_as_failed(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    rt = await kettle_runtime(runtimes, tmp_path, {"what": "tea", "background": True})
    conv, _ = await brewing(rt)
    (tmp_path / "tea.fail").touch()
    [note] = notices(await answered(rt, conv, READY))
    assert note.meta["state"] == "failed"
    assert '"succeeded":false' in note.content
    assert "the kettle broke" in note.content


async def test_b5_a_task_the_server_forgot_is_lost_never_a_success(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    rt = await kettle_runtime(runtimes, tmp_path, {"what": "tea", "background": True})
    conv, result = await brewing(rt)
    (tmp_path / "tea.forget").touch()
    [note] = notices(await answered(rt, conv, READY))
    assert note.meta["state"] == "lost"
    assert '"succeeded":false' in note.content
    task = await rt.tasks.get(conv, result.meta["task_key"])
    assert (task.state, task.exit_code) == (TaskState.LOST, None)


async def test_b5_stopping_the_run_cancels_the_task_on_the_server(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    rt = await kettle_runtime(runtimes, tmp_path, {"what": "tea", "background": True})
    conv, result = await brewing(rt)
    task_key = result.meta["task_key"]
    mcp_task_id = result.meta["mcp_task_id"]
    assert result.run_id is not None
    await rt.runs.stop(conv, result.run_id)

    await eventually(lambda: asyncio.sleep(0, kettle_requests(tmp_path)),
                     lambda asked: any(m == "tasks/cancel" and t == mcp_task_id
                                       for _, m, t in asked),
                     what="the server asked to cancel the task")

    async def task() -> TaskRecord:
        return await rt.tasks.get(conv, task_key)
    ended = await eventually(task, lambda t: t.state.terminal, what="the task's end")
    assert ended.state is TaskState.KILLED  # cancelled on request: never a success
    assert (ended.cancelled, ended.delivered) == (True, False)
    await rt.settle(conv)
    assert notices(await rt.transcript(conv)) == []  # a stopped run's task tells nothing
    assert json.loads((tmp_path / "tasks.json").read_text())[mcp_task_id]["status"] == (
        "cancelled")


async def test_b5_a_runtime_closed_mid_task_leaves_it_to_the_next_one(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    url = runtimes.backend.url
    config = RuntimeConfig(mcp_servers=(kettle_stdio(tmp_path),))
    model = kettle_model({"what": "tea", "background": True})
    async with Runtime.open(url, models=[model], config=config) as first:
        conv, result = await brewing(first)
    # Closing did not cancel the task on the server, nor end it in the journal.
    assert "tasks/cancel" not in [m for _, m, _ in kettle_requests(tmp_path)]
    async with Runtime.open(url, models=[model], config=config) as second:
        assert (await second.tasks.get(conv, result.meta["task_key"])).state is (
            TaskState.RUNNING)
        (tmp_path / "tea.done").touch()
        [note] = notices(await answered(second, conv, READY))
        assert note.meta["task_key"] == result.meta["task_key"]
        assert note.meta["state"] == "exited"


async def test_b5_a_persons_stop_of_the_running_turn_cancels_its_task_on_the_server(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    # The model's step after the call's result hangs: the turn is still running when the
    # person stops it.
    model = ScriptedModel(rules=[
        Rule({"text_equals": "brew"}, {"tool_calls": [
            {"name": "kettle.brew", "arguments": {"what": "tea", "background": True}}]}),
        Rule({"tool_result": "kettle.brew"}, {"text": STARTED, "delay_seconds": 3600}),
    ])
    rt = await runtimes(models=[model],
                        config=RuntimeConfig(mcp_servers=(kettle_stdio(tmp_path),)))
    conv = (await rt.create_conversation("alice", Profile(
        model="scripted", tools=("kettle.brew",)))).conversation_id
    await rt.post(conv, "brew")

    async def started() -> list[TaskRecord]:
        return await rt.tasks.list(conv)
    [task] = await eventually(started, bool, what="the task started by the running turn")
    [stopped] = await rt.stop(conv)
    await eventually(lambda: rt.runs.get(stopped), lambda run: run.status is RunStatus.STOPPED,
                     what="the turn stopped")
    await eventually(lambda: asyncio.sleep(0, kettle_requests(tmp_path)),
                     lambda asked: ("tasks/cancel", task.mcp_task_id) in
                     [(m, t) for _, m, t in asked],
                     what="the server asked to cancel the stopped turn's task")

    async def ended() -> TaskRecord:
        return await rt.tasks.get(conv, task.task_key)
    assert (await eventually(ended, lambda t: t.state.terminal, what="its end")).state is (
        TaskState.KILLED)
    await rt.settle(conv)
    assert notices(await rt.transcript(conv)) == []


async def test_b5_a_call_stopped_before_the_server_named_its_task_cancels_that_task(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    # The server creates the task, then takes its time to answer with it: the person stops
    # the turn in between. The task nobody will follow is cancelled on the server.
    server = MCPServer("kettle", command=kettle_stdio(tmp_path).command,
                       env={"SLOW_TASKS_DIR": str(tmp_path), "SLOW_TASKS_ANSWER_DELAY_S": "1.5"})
    rt = await kettle_runtime(runtimes, tmp_path, {"what": "tea", "background": True}, server)
    conv = (await rt.create_conversation("alice", Profile(
        model="scripted", tools=("kettle.brew",)))).conversation_id
    await rt.post(conv, "brew")
    [(_, _, mcp_task_id)] = await eventually(
        lambda: asyncio.sleep(0, kettle_requests(tmp_path)), bool, what="the task created")
    [stopped] = await rt.stop(conv)
    await eventually(lambda: rt.runs.get(stopped), lambda run: run.status is RunStatus.STOPPED,
                     what="the turn stopped")
    await eventually(lambda: asyncio.sleep(0, kettle_requests(tmp_path)),
                     lambda asked: ("tasks/cancel", mcp_task_id) in
                     [(m, t) for _, m, t in asked],
                     what="the server asked to cancel the task nobody follows", within_s=WAIT)
    assert await rt.tasks.list(conv) == []
