"""M4, T8 and C6 with real processes: a task's lifetime decides which reply learns of its end.

A turn-lifetime task belongs to the turn that started it: that turn's reply is not final until
the task ended (bounded by ``TurnConfig.task_drain``); the reply so far is kept as an interim
answer and the task's notification joins the same run, in a synthesis round. A task that outlives
the drain is handed off and comes back in a turn of its own, like a conversation-lifetime task.
A stopped run's tasks notify nothing, and its turn-lifetime processes do not outlive it.
"""

from __future__ import annotations

import asyncio
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import RuntimeFactory
from tests.crash.test_crash_tasks import live_group_members
from tests.scenarios.test_tasks import wait_for_runs
from tests.waiting import eventually
from tidings.clock import ManualClock
from tidings.models.base import DeltaCallback, ModelReply, ModelRequest, ToolCall
from tidings.models.scripted import Rule, ScriptedModel
from tidings.runtime.root import Runtime, RuntimeConfig
from tidings.tasks.journal import TaskRecord
from tidings.tasks.notify import NOTIFICATION_KIND, TaskState
from tidings.tools.registry import Tool, ToolContext
from tidings.turns.runner import TurnConfig
from tidings.types import Message, Origin, Profile, Run, RunStatus, StartKind

INTERIM = "Checking; one moment."
FINAL = "The check passed."
UNEXPECTED = "unexpected"
CHECK = "please check the build"
START = "start the job"


def shell(command: str, lifetime: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "shell", "arguments": {
        "command": command, "background": True, "lifetime": lifetime}}]}


def turn_task_model(command: str) -> ScriptedModel:
    """Starts a turn-lifetime task, replies at once, and answers the task's notification."""
    return ScriptedModel(
        rules=[
            Rule({"text_equals": CHECK}, shell(command, "turn")),
            Rule({"tool_result": "shell"}, {"text": INTERIM}),
            Rule({"meta_kind": NOTIFICATION_KIND}, {"text": FINAL}),
        ],
        default={"text": UNEXPECTED},
    )


async def settle(rt: Runtime, conv: str) -> None:
    """Wait until the conversation is settled; a conversation that never settles (a turn
    after turn) fails the test instead of hanging it."""
    try:
        await asyncio.wait_for(rt.settle(conv), 20)
    except TimeoutError:
        runs = [(r.trigger.value, r.status.value) for r in await rt.runs.list(conv)]
        raise AssertionError(f"the conversation did not settle: runs {runs}") from None


async def settled_runs(rt: Runtime, conv: str, count: int) -> list[Run]:
    """Settle the conversation until it has ``count`` runs, none of them running."""
    runs: list[Run] = []

    async def done() -> bool:
        nonlocal runs
        await settle(rt, conv)
        runs = await rt.runs.list(conv)
        return len(runs) >= count and all(r.status is not RunStatus.RUNNING for r in runs)

    await eventually(done, what=f"{count} settled runs", within_s=20)
    return runs


async def task_ended(rt: Runtime, conv: str, task_key: str) -> None:
    async def ended() -> bool:
        return (await rt.tasks.get(conv, task_key)).state.terminal

    await eventually(ended, what=f"the end of task {task_key} journalled")


def notes(messages: list[Message]) -> list[Message]:
    return [m for m in messages if m.meta.get("kind") == NOTIFICATION_KIND]


def started_task(messages: list[Message]) -> str:
    """The key of the task the shell tool's result named."""
    result = next(m for m in messages if m.role == "tool" and m.tool_name == "shell")
    return str(result.meta["task_key"])


async def kernel_receipts(rt: Runtime, conv: str) -> list[dict[str, Any]]:
    """The ``input_accepted`` events of task results."""
    return [e.data for e in await rt.events(conv)
            if e.type == "input_accepted" and e.data.get("origin") == "task_result"]


# -- M4: the synthesis round --------------------------------------------------------------------


async def test_m4_turn_task_drains_into_a_synthesis_round_before_the_reply_is_final(
    runtimes: RuntimeFactory,
) -> None:
    model = turn_task_model("sleep 0.3; echo check-ok")
    rt = await runtimes(models=[model])
    conv = (await rt.create_conversation("alice", Profile(model="scripted", tools=("shell",)))
            ).conversation_id
    accepted = await rt.post(conv, CHECK)
    [run] = await settled_runs(rt, conv, 1)

    # One turn for the person's input: the task's end did not wake another.
    assert (run.trigger, run.status) == (StartKind.PERSON, RunStatus.COMPLETED)
    assert model.calls == 3
    messages = await rt.transcript(conv)
    person, call, result, interim, note, final = messages
    assert (person.role, person.input_id) == ("user", accepted.input_id)
    assert [c["name"] for c in call.tool_calls] == ["shell"]
    assert (result.role, result.tool_call_id) == ("tool", call.tool_calls[0]["call_id"])
    task_key = started_task(messages)
    # The reply that came before the task ended is kept, marked interim ...
    assert (interim.role, interim.content, interim.meta.get("interim")) == (
        "assistant", INTERIM, True,
    )
    # ... the notification joins the same run after the tool result ...
    assert (note.role, note.meta["kind"], note.meta["task_key"]) == (
        "user", NOTIFICATION_KIND, task_key,
    )
    assert "check-ok" in note.content  # the excerpt of what the task wrote
    # ... and the synthesis step's reply is the final one.
    assert (final.role, final.content, final.meta.get("interim")) == ("assistant", FINAL, None)
    assert {m.run_id for m in messages} == {run.run_id}

    # Announced as accepted input, stamped with this run, and read by this run: not a new turn.
    [receipt] = await kernel_receipts(rt, conv)
    assert (receipt["origin"], receipt["run_public_id"], receipt["task_key"]) == (
        "task_result", run.run_id, task_key,
    )
    assert [(i.origin, i.run_id) for i in await rt.inputs.list(conv)] == [
        (Origin.PERSON, run.run_id), (Origin.TASK_RESULT, run.run_id),
    ]
    assert note.input_id == receipt["input_id"]
    task = await rt.tasks.get(conv, task_key)
    assert (task.state, task.exit_code) == (TaskState.EXITED, 0)
    assert (task.handed_off, task.delivered, task.consumed, task.cancelled) == (
        True, True, True, False,
    )
    assert task.notification_seq == note.seq


class TurnTaskWaiter:
    """Starts a turn-lifetime task, then waits for it with the ``wait`` tool (T8)."""

    name = "waiter"

    def __init__(self) -> None:
        self.calls = 0

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
    ) -> ModelReply:
        self.calls += 1
        newest = request.messages[-1]
        if newest.meta.get("kind") == NOTIFICATION_KIND:
            return ModelReply(UNEXPECTED)
        if newest.role == "user":
            return ModelReply("", (ToolCall("c1", "shell", {
                "command": "sleep 0.2; echo waited", "background": True, "lifetime": "turn"}),))
        if newest.role == "tool" and newest.tool_name == "shell":
            started = re.search(r"task (bg-[0-9a-f]+)", newest.content)
            assert started is not None
            return ModelReply("", (ToolCall("c2", "wait", {"task_key": started.group(1),
                                                           "timeout_s": 10}),))
        return ModelReply("It ended.")


async def test_t8_turn_task_the_model_waited_for_gets_no_synthesis_round(
    runtimes: RuntimeFactory,
) -> None:
    model = TurnTaskWaiter()
    rt = await runtimes(models=[model])
    conv = (await rt.create_conversation(
        "alice", Profile(model="waiter", tools=("shell", "wait"))
    )).conversation_id
    await rt.post(conv, "deploy and wait")
    [run] = await settled_runs(rt, conv, 1)

    assert run.status is RunStatus.COMPLETED
    messages = await rt.transcript(conv)
    task_key = started_task(messages)
    waited = next(m for m in messages if m.tool_name == "wait")
    assert '"state": "exited"' in waited.content  # the model saw the end in the wait result
    # So no notification and no synthesis round: the reply after the wait is final at once.
    assert notes(messages) == []
    assert [m.content for m in messages if m.role == "assistant"] == ["", "", "It ended."]
    assert not any(m.meta.get("interim") for m in messages)
    assert model.calls == 3
    assert await kernel_receipts(rt, conv) == []
    task = await rt.tasks.get(conv, task_key)
    assert task.state is TaskState.EXITED
    assert (task.reported_in_tool_result, task.delivered) == (True, False)


async def test_m4_turn_task_that_outlives_the_drain_is_handed_off_to_a_turn_of_its_own(
    runtimes: RuntimeFactory,
) -> None:
    model = turn_task_model("sleep 1; echo late-check-ok")
    config = RuntimeConfig(turns=TurnConfig(task_drain=timedelta(milliseconds=50)))
    rt = await runtimes(models=[model], config=config)
    conv = (await rt.create_conversation("alice", Profile(model="scripted", tools=("shell",)))
            ).conversation_id
    await rt.post(conv, CHECK)
    first, woken = await settled_runs(rt, conv, 2)

    assert [(r.trigger, r.status) for r in (first, woken)] == [
        (StartKind.PERSON, RunStatus.COMPLETED), (StartKind.WAKE, RunStatus.COMPLETED),
    ]
    messages = await rt.transcript(conv)
    _, _, _, reply, note, final = messages
    task_key = started_task(messages)
    # The first reply was final without waiting for the task: no interim, no synthesis round.
    assert (reply.content, reply.meta.get("interim"), reply.run_id) == (
        INTERIM, None, first.run_id,
    )
    task = await rt.tasks.get(conv, task_key)
    assert first.ended_at_us is not None
    assert task.ended_at_us is not None
    assert first.ended_at_us < task.ended_at_us  # that turn ended before the task did
    # The task came back later as an ordinary notification -- kernel mail stamped with the
    # first run -- read by the turn it woke.
    [receipt] = await kernel_receipts(rt, conv)
    assert (receipt["run_public_id"], receipt["task_key"]) == (first.run_id, task_key)
    assert (note.input_id, note.run_id) == (receipt["input_id"], woken.run_id)
    assert (note.meta["kind"], note.meta["task_key"]) == (NOTIFICATION_KIND, task_key)
    assert "late-check-ok" in note.content
    assert (final.content, final.run_id) == (FINAL, woken.run_id)
    assert (task.state, task.delivered, task.consumed) == (TaskState.EXITED, True, True)


# -- C6: a stopped run's tasks ------------------------------------------------------------------


class Gate:
    """A host tool that blocks until its turn is cancelled; says when it was entered."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.cancelled = False

    async def handler(self, ctx: ToolContext, args: Mapping[str, Any]) -> str:
        self.entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return "never"

    def tool(self) -> Tool:
        return Tool("gate", "Blocks until the turn is stopped.", self.handler)


@dataclass
class Replying:
    """Answers through ``inner``; ``replied`` is set as the reply to the shell result returns.

    Nothing is awaited between that return and the runner's drain of its turn-lifetime tasks,
    so a test woken by ``replied`` finds the turn waiting in the drain.
    """

    inner: ScriptedModel
    name: str = "scripted"
    replied: asyncio.Event = field(default_factory=asyncio.Event)

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
    ) -> ModelReply:
        reply = await self.inner.complete(request, on_delta=on_delta)
        if request.messages[-1].tool_name == "shell":
            self.replied.set()
        return reply


@pytest.mark.parametrize("task_ends", ["before_the_stop", "after_the_stop"])
async def test_c6_stop_cancels_the_notification_of_a_conversation_task(
    runtimes: RuntimeFactory, tmp_path: Path, task_ends: str
) -> None:
    finish = tmp_path / "finish"
    # The task runs until the test lets it end: before the stop, or after it.
    command = f"while [ ! -e {shlex.quote(str(finish))} ]; do sleep 0.02; done; echo finished"
    model = ScriptedModel(
        rules=[
            Rule({"text_equals": START}, shell(command, "conversation")),
            Rule({"tool_result": "shell"}, {"tool_calls": [{"name": "gate"}]}),
            Rule({"meta_kind": NOTIFICATION_KIND}, {"text": UNEXPECTED}),
        ],
        default={"text": UNEXPECTED},
    )
    gate = Gate()
    rt = await runtimes(models=[model], tools=[gate.tool()])
    conv = (await rt.create_conversation(
        "alice", Profile(model="scripted", tools=("shell", "gate"))
    )).conversation_id
    await rt.post(conv, START)
    await asyncio.wait_for(gate.entered.wait(), 10)
    task_key = started_task(await rt.transcript(conv))

    if task_ends == "before_the_stop":
        finish.touch()
        await task_ended(rt, conv, task_key)
    [stopped] = await rt.stop(conv)
    await settle(rt, conv)
    if task_ends == "after_the_stop":
        finish.touch()
        await task_ended(rt, conv, task_key)  # the notice would be written in that same unit
    await settle(rt, conv)

    assert gate.cancelled
    runs = await rt.runs.list(conv)
    assert [(r.run_id, r.status, r.failure_code) for r in runs] == [
        (stopped, RunStatus.STOPPED, "stopped")
    ]  # no wake-up turn
    messages = await rt.transcript(conv)
    assert notes(messages) == []
    assert UNEXPECTED not in [m.content for m in messages]
    task = await rt.tasks.get(conv, task_key)
    # A conversation-lifetime process is not killed by the stop: it ended by itself.
    assert (task.state, task.exit_code) == (TaskState.EXITED, 0)
    assert (task.cancelled, task.delivered, task.consumed) == (True, False, False)


@pytest.mark.parametrize("stopped_in", ["a_tool", "the_drain"])
async def test_c6_stop_kills_the_turn_task_of_the_stopped_run(
    runtimes: RuntimeFactory, stopped_in: str
) -> None:
    after_start: Mapping[str, Any] = (
        {"tool_calls": [{"name": "gate"}]} if stopped_in == "a_tool" else {"text": INTERIM}
    )
    model = Replying(ScriptedModel(
        rules=[
            Rule({"text_equals": CHECK}, shell("sleep 60", "turn")),
            Rule({"tool_result": "shell"}, after_start),
            Rule({"meta_kind": NOTIFICATION_KIND}, {"text": UNEXPECTED}),
        ],
        default={"text": UNEXPECTED},
    ))
    gate = Gate()
    rt = await runtimes(models=[model], tools=[gate.tool()])
    conv = (await rt.create_conversation(
        "alice", Profile(model="scripted", tools=("shell", "gate"))
    )).conversation_id
    await rt.post(conv, CHECK)
    # The turn is inside the gate tool, or its reply waits for the task (up to 10 minutes).
    await asyncio.wait_for((gate.entered if stopped_in == "a_tool" else model.replied).wait(), 10)
    task_key = started_task(await rt.transcript(conv))
    running = rt.supervisor.get(task_key)
    assert running is not None
    assert running.pid is not None
    pid = running.pid
    assert live_group_members(pid)

    [stopped] = await rt.stop(conv)
    await settle(rt, conv)
    await task_ended(rt, conv, task_key)

    task = await rt.tasks.get(conv, task_key)
    assert task.state is TaskState.KILLED
    assert (task.cancelled, task.delivered) == (True, False)

    async def gone() -> bool:
        return not live_group_members(pid)

    await eventually(gone, what=f"the process group {pid} of task {task_key} gone")
    await settle(rt, conv)
    runs = await rt.runs.list(conv)
    assert [(r.run_id, r.status) for r in runs] == [(stopped, RunStatus.STOPPED)]
    messages = await rt.transcript(conv)
    assert notes(messages) == []
    assert not any(m.meta.get("interim") for m in messages)
    assert await kernel_receipts(rt, conv) == []


# -- found by review: M4's supplementary turn, shutdown and lost slots ---------------------------


async def test_m4_a_conversation_task_that_ended_early_answers_after_the_final_reply(
    runtimes: RuntimeFactory,
) -> None:
    model = ScriptedModel(rules=[
        # One step: a background task that ends at once, and a foreground command outlasting it.
        Rule({"text_equals": "go"}, {"tool_calls": [
            {"name": "shell", "arguments": {"command": "echo fast", "background": True}},
            {"name": "shell", "arguments": {"command": "sleep 0.5"}}]}),
        Rule({"meta_kind": "task_notification"}, {"text": "answer to the task"}),
        Rule({"tool_result": "shell"}, {"text": "original reply"}),
    ], default={"text": "ok"})
    rt = await runtimes(models=[model])
    profile = Profile(model="scripted", tools=("shell",))
    conv = (await rt.create_conversation("alice", profile)).conversation_id
    await rt.post(conv, "go")
    first, second = await wait_for_runs(rt, conv, 2)
    transcript = await rt.transcript(conv)
    final = next(m for m in transcript if m.content == "original reply")
    note = next(m for m in transcript if m.meta.get("kind") == NOTIFICATION_KIND)
    assert final.run_id == first.run_id  # the original reply is final ...
    assert note.seq > final.seq  # ... before the result is told,
    assert second.trigger is StartKind.WAKE  # in a supplementary turn
    assert transcript[-1].content == "answer to the task"


async def test_t9_a_graceful_shutdown_reports_the_running_turns_tasks(
    runtimes: RuntimeFactory,
) -> None:
    entered = asyncio.Event()

    async def gate(context: ToolContext, arguments: Mapping[str, Any]) -> str:
        entered.set()
        await asyncio.Event().wait()
        return "never"

    model = ScriptedModel(rules=[
        Rule({"text_equals": "go"}, {"tool_calls": [{"name": "shell", "arguments": {
            "command": "sleep 30", "background": True}}]}),
        Rule({"tool_result": "shell"}, {"tool_calls": [{"name": "gate", "arguments": {}}]}),
        Rule({"meta_kind": "task_notification"}, {"text": "told about the task"}),
    ], default={"text": "ok"})
    first = await runtimes(models=[model], tools=[Tool("gate", "Blocks.", gate)])
    profile = Profile(model="scripted", tools=("shell", "gate"))
    conv = (await first.create_conversation("alice", profile)).conversation_id
    await first.post(conv, "go")
    await asyncio.wait_for(entered.wait(), 10)
    await first.close()  # a shutdown, not a person's stop

    second = await runtimes(models=[model], tools=[Tool("gate", "Blocks.", gate)])
    runs = await wait_for_runs(second, conv, 2)
    assert (runs[0].status, runs[0].failure_code) == (RunStatus.STOPPED, "shutdown")
    (task,) = await second.tasks.list(conv)
    assert task.state is TaskState.KILLED
    assert not task.cancelled  # the model is told, never silently dropped
    assert task.delivered
    assert task.consumed
    assert (await second.transcript(conv))[-1].content == "told about the task"


async def test_m4_a_turn_task_of_a_turn_that_lost_its_slot_is_handed_to_the_conversation(
    runtimes: RuntimeFactory,
) -> None:
    model = ScriptedModel(rules=[
        Rule({"text_equals": "go"}, {"tool_calls": [{"name": "shell", "arguments": {
            "command": "sleep 1; echo hi", "background": True, "lifetime": "turn"}}]}),
        Rule({"tool_result": "shell"}, {"text": "interim"}),
        Rule({"meta_kind": "task_notification"}, {"text": "told"}),
    ], default={"text": "ok"})
    clock = ManualClock()
    config = RuntimeConfig(turns=TurnConfig(slot_ttl=timedelta(milliseconds=300)))
    rt = await runtimes(models=[model], clock=clock, config=config)
    profile = Profile(model="scripted", tools=("shell",))
    conv = (await rt.create_conversation("alice", profile)).conversation_id
    await rt.post(conv, "go")

    async def drained() -> bool:
        return model.calls == 2

    # The second answer ("interim") was the reply: the turn now waits in the drain (the
    # scripted model returns without yielding, so the turn went straight on into it).
    await eventually(drained, what="the reply waiting in the drain")
    assert await rt.tasks.list(conv)
    clock.advance(timedelta(seconds=1))  # a stall: the slot's lease runs out

    async def the_task() -> TaskRecord:
        await rt.settle(conv)
        (task,) = await rt.tasks.list(conv)
        return task

    task = await eventually(the_task, lambda task: task.consumed,
                            what="the task's notice consumed", within_s=20, poll_s=0.05)
    assert task.handed_off
    assert task.state is TaskState.EXITED
    runs = await rt.runs.list(conv)
    assert (runs[0].status, runs[0].failure_code) == (RunStatus.FAILED, "interrupted")
    assert (await rt.transcript(conv))[-1].content == "told"
