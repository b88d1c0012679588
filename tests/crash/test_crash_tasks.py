"""T9 and T6: a runtime killed with SIGKILL while its background tasks run, or while its turn
consumes a task's notification, then restarted on the same database.

A task whose runtime was killed is ``lost`` after restart -- never a success -- its left-behind
process group is killed, and the model is told once, at a safe point. A notification whose
message was written but not consumed when the runtime died is found again by its event id and
never written a second time; the restarted runtime's turn consumes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg

from tests.conftest import Backend
from tests.crash.helpers import Child, wait_instance_released
from tests.waiting import eventually
from tidings.clock import SystemClock
from tidings.conversations.catalog import Conversations
from tidings.models.scripted import Rule, ScriptedModel
from tidings.runtime.root import Runtime
from tidings.store import open_store
from tidings.tasks.journal import TaskRecord, task_from_row
from tidings.tasks.notify import NOTIFICATION_KIND, TaskState
from tidings.types import Message, RunStatus, StartKind

CHILD = """
import asyncio, json, sys
from tidings import Profile, Rule, Runtime, ScriptedModel

MODEL = ScriptedModel(rules=[
    Rule({"text_contains": "deploy"}, {"tool_calls": [{"name": "shell", "arguments": {
        "command": "sleep 60", "background": True}}]}),
    Rule({"tool_result": "shell"}, {"text": "Deploy started."}),
])

async def main() -> None:
    async with Runtime.open(sys.argv[1], models=[MODEL]) as rt:
        conv = (await rt.create_conversation("alice", Profile(model="scripted", tools=("shell",)))
                ).conversation_id
        await rt.post(conv, "deploy it")
        await rt.settle(conv)
        print(json.dumps({"checkpoint": "deploying", "conversation_id": conv,
                          "instance_id": rt.instance_id}), flush=True)
        await asyncio.sleep(3600)

asyncio.run(main())
"""

# The woken turn's model call never returns: the runtime dies while the notification it was
# handed is being consumed. A short slot lets the restarted runtime take the conversation over
# soon after the kill.
CONSUMING_CHILD = """
import asyncio, json, sys
from datetime import timedelta
from tidings import Profile, Rule, Runtime, RuntimeConfig, ScriptedModel, TurnConfig

SCRIPTED = ScriptedModel(rules=[
    Rule({"text_equals": "build it in the background"}, {"tool_calls": [{"name": "shell",
        "arguments": {"command": "sleep 0.5; echo build ok", "background": True}}]}),
    Rule({"tool_result": "shell"}, {"text": "Build started."}),
])

class Stuck:
    name = "scripted"

    async def complete(self, request, *, on_delta=None):
        newest = request.messages[-1]
        if newest.meta.get("kind") == "task_notification":
            print(json.dumps({"checkpoint": "consuming", "event_id": newest.meta["event_id"],
                              "task_key": newest.meta["task_key"]}), flush=True)
            await asyncio.sleep(3600)
        return await SCRIPTED.complete(request, on_delta=on_delta)

async def main() -> None:
    config = RuntimeConfig(turns=TurnConfig(slot_ttl=timedelta(seconds=1)))
    async with Runtime.open(sys.argv[1], models=[Stuck()], config=config) as rt:
        conv = (await rt.create_conversation("alice", Profile(model="scripted", tools=("shell",)))
                ).conversation_id
        print(json.dumps({"checkpoint": "ready", "conversation_id": conv,
                          "instance_id": rt.instance_id}), flush=True)
        await rt.post(conv, "build it in the background")
        await asyncio.sleep(3600)

asyncio.run(main())
"""

RESTARTED = ScriptedModel(
    rules=[Rule({"meta_kind": "task_notification"}, {"text": "The deploy's outcome is unknown."})],
    default={"text": "ok"},
)

BUILD_ANSWER = "The build finished."
RESTARTED_AFTER_BUILD = ScriptedModel(
    rules=[Rule({"meta_kind": NOTIFICATION_KIND}, {"text": BUILD_ANSWER})],
    default={"text": "ok"},
)


@contextlib.asynccontextmanager
async def runtime_child(script: str, url: str) -> AsyncIterator[Child]:
    """Run ``script`` (a runtime announcing JSON checkpoints) on ``url``; SIGKILL and reap it on
    exit, whatever happened."""
    fd, name = tempfile.mkstemp(prefix="tidings-task-child-", suffix=".stderr")
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", script, url, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=fd,
        )
    finally:
        os.close(fd)
    child = Child(proc, Path(name))
    try:
        yield child
    finally:
        await child.kill()
        if proc.stdout is not None:
            await proc.stdout.read()  # so the pipe transport is closed cleanly
        child.forget()


def live_group_members(pgid: int) -> list[int]:
    """The living processes of process group ``pgid``, from ``/proc``.

    A zombie is dead -- it only waits to be reaped, by a parent that may be gone -- so it does
    not count.
    """
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes()
        except OSError:
            continue  # it ended while we looked
        # The command name is in parentheses and may hold anything: fields resume after ')'.
        state, _ppid, pgrp = stat[stat.rindex(b")") + 2:].split()[:3]
        if int(pgrp) == pgid and state not in (b"Z", b"X"):
            members.append(int(entry.name))
    return members


def recorded_processes(url: str, conversation_id: str) -> list[tuple[str, str, int]]:
    """``(task_key, state, pid)`` of the conversation's tasks whose process was recorded,
    straight from the database (crash forensics)."""
    query = ("SELECT t.task_key, t.state, p.pid FROM tasks t "
             "JOIN task_processes p ON p.task_id = t.task_id WHERE t.conversation_id = {}")
    if url.startswith(("postgresql://", "postgres://")):
        with psycopg.connect(url) as conn:
            rows = conn.execute(query.format("%s"), (conversation_id,)).fetchall()
    else:
        conn3 = sqlite3.connect(url.removeprefix("sqlite:///"))
        try:
            rows = conn3.execute(query.format("?"), (conversation_id,)).fetchall()
        finally:
            conn3.close()
    return [(str(key), str(state), int(pid)) for key, state, pid in rows]


async def read_back(url: str, conversation_id: str, task_key: str
                    ) -> tuple[TaskRecord, list[Message]]:
    """The task's journal row and the transcript, read by a store of the test's own (no
    runtime runs on the database)."""
    store = await open_store(url)
    try:
        row = await store.read(
            lambda tx: tx.one("get_task", conversation_id=conversation_id, task_key=task_key)
        )
        messages = await Conversations(store, SystemClock()).transcript(conversation_id)
    finally:
        await store.close()
    assert row is not None
    return task_from_row(row), messages


async def answered(rt: Runtime, conversation_id: str, answer: str) -> list[Message]:
    """Settle the conversation until its newest message is ``answer``; the transcript."""
    within_s = 20.0

    async def settled() -> list[Message]:
        # Bounded: a conversation that never settles (turn after turn) fails, not hangs.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(rt.settle(conversation_id), within_s)
        return await rt.transcript(conversation_id)

    return await eventually(settled, lambda messages: messages and messages[-1].content == answer,
                            what=f"the answer {answer!r}", within_s=within_s, poll_s=0.05)


def notifications(messages: list[Message]) -> list[Message]:
    return [m for m in messages if m.meta.get("kind") == NOTIFICATION_KIND]


async def test_t9_task_of_a_killed_runtime_is_lost_after_restart(backend: Backend) -> None:
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, backend.url, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        line = await asyncio.wait_for(child.stdout.readline(), 30)
        assert line, (await child.stderr.read()).decode() if child.stderr else "no output"
        conv = json.loads(line)["conversation_id"]
    finally:
        with contextlib.suppress(ProcessLookupError):
            child.kill()  # SIGKILL: no shutdown code runs
        await child.wait()

    async with Runtime.open(backend.url, models=[RESTARTED]) as rt:
        messages = await answered(rt, conv, "The deploy's outcome is unknown.")
        notes = [m for m in messages if m.meta.get("kind") == NOTIFICATION_KIND]
        assert len(notes) == 1
        assert notes[0].meta["state"] == "lost"
        assert '"succeeded":false' in notes[0].content
        runs = await rt.runs.list(conv)
        assert runs[-1].trigger is StartKind.WAKE
        assert runs[-1].status is RunStatus.COMPLETED
        # A second restart finds nothing more to say.
    async with Runtime.open(backend.url, models=[RESTARTED]) as again:
        await again.settle(conv)
        assert len([m for m in await again.transcript(conv)
                    if m.meta.get("kind") == NOTIFICATION_KIND]) == 1


async def test_t9_process_left_behind_by_a_killed_runtime_is_killed_on_restart(
    backend: Backend,
) -> None:
    async with runtime_child(CHILD, backend.url) as child:
        deploying = await child.checkpoint("deploying")
        conv = deploying["conversation_id"]
        [(task_key, state, pid)] = recorded_processes(backend.url, conv)
        assert state == "running"
        await child.kill()  # SIGKILL: no shutdown code runs
    # Precondition: the task's process group has a session of its own, so it outlives its
    # runtime -- left behind, with nobody to report its end.
    assert live_group_members(pid), f"task {task_key}'s process {pid} died with its runtime"
    await wait_instance_released(backend.url, deploying["instance_id"])

    async with Runtime.open(backend.url, models=[RESTARTED]) as rt:
        # Starting reconciled the dead instance: the process it left behind is stopped, not
        # adopted, and the task is lost -- never a success.
        async def members() -> list[int]:
            return live_group_members(pid)

        await eventually(members, lambda living: not living,
                         what=f"the process group {pid} stopped by the restart", within_s=10)
        messages = await answered(rt, conv, "The deploy's outcome is unknown.")
        [note] = notifications(messages)
        assert note.meta["task_key"] == task_key
        assert note.meta["state"] == "lost"
    assert recorded_processes(backend.url, conv) == [(task_key, "lost", pid)]


async def test_t6_notification_being_consumed_at_a_crash_is_not_written_again(
    backend: Backend,
) -> None:
    async with runtime_child(CONSUMING_CHILD, backend.url) as child:
        ready = await child.checkpoint("ready")
        consuming = await child.checkpoint("consuming")
        await child.kill()  # SIGKILL while the woken turn's model step holds the notification
    conv = ready["conversation_id"]
    event_id, task_key = consuming["event_id"], consuming["task_key"]

    # What the dead runtime left: the notice written and delivered, not consumed.
    task, messages = await read_back(backend.url, conv, task_key)
    assert (task.event_id, task.delivered, task.consumed) == (event_id, True, False)
    [note] = notifications(messages)
    assert note.meta["event_id"] == event_id
    assert task.notification_seq == note.seq
    await wait_instance_released(backend.url, ready["instance_id"])

    async with Runtime.open(backend.url, models=[RESTARTED_AFTER_BUILD]) as rt:
        # Once the dead turn's slot lease runs out, a turn of this runtime reads the notice.
        messages = await answered(rt, conv, BUILD_ANSWER)
        [kept] = notifications(messages)
        assert (kept.seq, kept.meta["event_id"]) == (note.seq, event_id)  # not written again
        [answer] = [m for m in messages if m.content == BUILD_ANSWER]
        assert answer.seq > note.seq
        runs = await rt.runs.list(conv)
        assert [(r.trigger, r.status, r.failure_code) for r in runs] == [
            (StartKind.PERSON, RunStatus.COMPLETED, None),
            (StartKind.WAKE, RunStatus.FAILED, "interrupted"),
            (StartKind.WAKE, RunStatus.COMPLETED, None),
        ]
        assert answer.run_id == runs[-1].run_id
    task, messages = await read_back(backend.url, conv, task_key)
    # Nothing lost: the task's own outcome stands, and its notice is handled.
    assert (task.state, task.exit_code) == (TaskState.EXITED, 0)
    assert (task.delivered, task.consumed, task.continuation_error) == (True, True, None)
    assert [m.content for m in messages if m.role == "assistant"] == [
        "", "Build started.", BUILD_ANSWER,
    ]
    assert "build ok" in note.content

    # A second restart finds nothing more to say.
    async with Runtime.open(backend.url, models=[RESTARTED_AFTER_BUILD]) as again_rt:
        await asyncio.wait_for(again_rt.settle(conv), 20)
        assert await again_rt.transcript(conv) == messages
        assert len(await again_rt.runs.list(conv)) == 3
