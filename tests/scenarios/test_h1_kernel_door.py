"""H1 with real processes, on both backends: a background task's notice -- whatever its
lifetime -- enters the conversation through its single door as kernel mail of origin
``task_result``: a row of the inputs with its stamps (the run that started the task, the task
key), announced by ``input_accepted``, listed in read order (the kernel's rows first) and read
by a run that names it. The T guarantees hold as before: after the tool result, never inside
a call/result pair, once, consumed only by a step that committed.

Where a process or a turn must wait for the test, it waits on a file or an event the test
controls: nothing depends on how long anything takes.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.conftest import RuntimeFactory
from tests.scenarios.test_tasks import Waiter
from tests.waiting import eventually
from tidings.models.base import (
    DeltaCallback,
    ModelError,
    ModelErrorKind,
    ModelReply,
    ModelRequest,
    ToolCall,
)
from tidings.models.scripted import Rule, ScriptedModel
from tidings.runtime.root import Runtime, RuntimeConfig
from tidings.scheduler.coordinator import CoordinatorConfig
from tidings.tasks.notify import NOTIFICATION_KIND
from tidings.tools.registry import Tool, ToolContext
from tidings.types import (
    Author,
    AuthorKind,
    DeliveryMode,
    Event,
    Input,
    InputState,
    Message,
    Origin,
    Profile,
    Run,
    RunStatus,
    StartKind,
)

OWNER = "alice"
KERNEL_AUTHOR = Author(AuthorKind.HUMAN, OWNER, OWNER)
WAIT_S = 20.0  # a bound that only stops a broken test from hanging; never asserted on
FINISHED = "The build finished."
STARTED = "Started; I will report back."


def waits_for(flag: Path, output: str) -> str:
    """A command that ends only once the test creates ``flag``."""
    quoted = shlex.quote(str(flag))
    return f"while [ ! -e {quoted} ]; do sleep 0.02; done; echo {shlex.quote(output)}"


def background(command: str, lifetime: str = "conversation") -> dict[str, Any]:
    return {"tool_calls": [{"name": "shell", "arguments": {
        "command": command, "background": True, "lifetime": lifetime}}]}


async def settled_runs(rt: Runtime, conv: str, count: int) -> list[Run]:
    """Settle the conversation until it has ``count`` runs, none of them running."""
    runs: list[Run] = []

    async def done() -> bool:
        nonlocal runs
        await asyncio.wait_for(rt.settle(conv), WAIT_S)
        runs = await rt.runs.list(conv)
        return len(runs) >= count and all(r.status is not RunStatus.RUNNING for r in runs)

    await eventually(done, what=f"{count} settled runs")
    return runs


async def task_ended(rt: Runtime, conv: str, task_key: str) -> None:
    async def ended() -> bool:
        return (await rt.tasks.get(conv, task_key)).state.terminal

    await eventually(ended, what=f"the end of task {task_key} journalled")


def started_task(messages: list[Message]) -> str:
    result = next(m for m in messages if m.role == "tool" and m.tool_name == "shell")
    return str(result.meta["task_key"])


def notes(messages: list[Message]) -> list[Message]:
    return [m for m in messages if m.meta.get("kind") == NOTIFICATION_KIND]


def notices(inputs: list[Input]) -> list[Input]:
    return [i for i in inputs if i.origin is Origin.TASK_RESULT]


def accepted_notices(events: list[Event]) -> list[dict[str, Any]]:
    return [e.data for e in events
            if e.type == "input_accepted" and e.data["origin"] == "task_result"]


def started_with(events: list[Event], run_id: str) -> list[str]:
    """The inputs the run named when it started (its ``turn_status`` event)."""
    [start] = [e for e in events if e.type == "turn_status"
               and e.data["run_public_id"] == run_id and e.data["status"] == "running"]
    return list(start.data["inputs"])


def materialized(events: list[Event], input_id: str) -> dict[str, Any]:
    [read] = [e.data for e in events
              if e.type == "input_materialized" and e.data["input_id"] == input_id]
    return read


@dataclass
class Gates:
    """A host tool that waits, per conversation, until the test opens it."""

    entered: dict[str, asyncio.Event] = field(default_factory=dict)
    opened: dict[str, asyncio.Event] = field(default_factory=dict)

    def of(self, conv: str) -> tuple[asyncio.Event, asyncio.Event]:
        return (self.entered.setdefault(conv, asyncio.Event()),
                self.opened.setdefault(conv, asyncio.Event()))

    async def handler(self, ctx: ToolContext, args: Mapping[str, Any]) -> str:
        entered, opened = self.of(ctx.conversation_id)
        entered.set()
        await opened.wait()
        return "opened"

    def tool(self) -> Tool:
        return Tool("gate", "Waits until the test opens it.", self.handler, read_only=True)


# -- a conversation-lifetime task: its notice is an input the woken run reads --------------------


async def test_h1_a_conversation_task_notice_is_a_task_result_input_the_woken_run_reads(
    runtimes: RuntimeFactory,
) -> None:
    model = ScriptedModel(rules=[
        Rule({"text_contains": "build in the background"},
             background("sleep 0.2; echo build ok")),
        Rule({"meta_kind": NOTIFICATION_KIND}, {"text": FINISHED}),
        Rule({"tool_result": "shell"}, {"text": STARTED}),
    ])
    rt = await runtimes(models=[model])
    conv = (await rt.create_conversation(OWNER, Profile(model="scripted", tools=("shell",)))
            ).conversation_id
    asked = await rt.post(conv, "please build in the background")
    first, woken = await settled_runs(rt, conv, 2)
    assert [(r.trigger, r.status) for r in (first, woken)] == [
        (StartKind.PERSON, RunStatus.COMPLETED), (StartKind.WAKE, RunStatus.COMPLETED),
    ]
    messages = await rt.transcript(conv)
    task_key = started_task(messages)
    task = await rt.tasks.get(conv, task_key)

    # The inputs: the person's, then the notice -- kernel mail with its stamps, read by the
    # run it woke.
    person, notice = await rt.inputs.list(conv)
    assert (person.input_id, person.run_id) == (asked.input_id, first.run_id)
    assert (notice.origin, notice.authored_by, notice.delivery_mode) == (
        Origin.TASK_RESULT, KERNEL_AUTHOR, DeliveryMode.QUEUE,
    )
    assert (notice.run_public_id, notice.task_key) == (first.run_id, task_key)
    assert (notice.state, notice.run_id) == (InputState.MATERIALIZED, woken.run_id)
    assert (notice.meta["kind"], notice.meta["event_id"]) == (NOTIFICATION_KIND, task.event_id)
    assert notice.queue_position == 2  # the arrival number

    # Announced in the feed, once, as the door announces every input (M15) ...
    events = await rt.events(conv)
    assert accepted_notices(events) == [{
        "input_id": notice.input_id, "origin": "task_result",
        "content": notice.content, "by_runtime": True,
        "authored_by": {"kind": "human", "handle": OWNER, "display_name": OWNER},
        "queue_position": 2, "delivery_mode": "queue",
        "run_public_id": first.run_id, "task_key": task_key,
    }]
    # ... and named by the run that read it.
    assert started_with(events, woken.run_id) == [notice.input_id]
    assert started_with(events, first.run_id) == [asked.input_id]

    # The transcript's notice is that input: after the tool result (T4), once (T6, T8), the
    # process output fenced as data, consumed by the woken run's answer (T5).
    [note] = notes(messages)
    assert (note.input_id, note.origin, note.run_id) == (
        notice.input_id, Origin.TASK_RESULT, woken.run_id,
    )
    read = materialized(events, notice.input_id)
    assert (read["run_public_id"], read["message_seq"], read["origin"]) == (
        woken.run_id, note.seq, "task_result",
    )
    call = next(m for m in messages if m.tool_calls)
    result = next(m for m in messages if m.role == "tool")
    assert result.seq == call.seq + 1
    assert note.seq > result.seq
    assert "<untrusted_process_output" in note.content
    assert "build ok" in note.content
    assert (messages[-1].content, messages[-1].run_id) == (FINISHED, woken.run_id)
    assert (task.delivered, task.consumed, task.notification_seq) == (True, True, note.seq)
    statuses = [e.data for e in events if e.type == "task_status" and e.data.get("delivered")]
    assert [s["resolved_by"] for s in statuses] == [
        {"kind": "notification", "input_id": notice.input_id}
    ]


# -- read order: the kernel's row before a person's input that arrived earlier ------------------


async def test_h1_a_queued_notice_is_listed_and_read_before_an_earlier_person_input(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    """The notice and a person's input wait together (one turn slot for the runtime, taken by
    another conversation): the listing shows the kernel's row first, and the next turn -- the
    person's -- reads it first, though it arrived later (M2)."""
    flag = tmp_path / "build-may-end"
    gates = Gates()
    model = ScriptedModel(rules=[
        Rule({"text_equals": "build it"}, background(waits_for(flag, "built"))),
        Rule({"tool_result": "shell"}, {"tool_calls": [{"name": "gate", "arguments": {}}]}),
        Rule({"tool_result": "gate"}, {"text": STARTED}),
        Rule({"text_equals": "hold the slot"},
             {"tool_calls": [{"name": "gate", "arguments": {}}]}),
        Rule({"text_equals": "what now?"}, {"text": "Next."}),
        Rule({"meta_kind": NOTIFICATION_KIND}, {"text": FINISHED}),
    ])
    config = RuntimeConfig(coordinator=CoordinatorConfig(max_concurrent_turns=1))
    rt = await runtimes(models=[model], tools=[gates.tool()], config=config)
    profile = Profile(model="scripted", tools=("shell", "gate"))
    conv = (await rt.create_conversation(OWNER, profile)).conversation_id
    other = (await rt.create_conversation(OWNER, profile)).conversation_id

    await rt.post(conv, "build it")
    entered, opened = gates.of(conv)
    await asyncio.wait_for(entered.wait(), WAIT_S)  # the build runs; the turn holds the slot
    flag.touch()
    task_key = started_task(await rt.transcript(conv))
    await task_ended(rt, conv, task_key)
    assert not (await rt.tasks.get(conv, task_key)).delivered  # a turn holds the slot: not yet
    asked = await rt.post(conv, "what now?")  # queued behind the running turn
    await rt.post(other, "hold the slot")  # queued for the runtime's one turn slot
    await asyncio.sleep(0)  # let the other conversation's start queue for that slot
    opened.set()
    other_entered, other_opened = gates.of(other)
    # The first turn ended (its reply final, the notice delivered after it, M4); the other
    # conversation's turn took the slot.
    await asyncio.wait_for(other_entered.wait(), WAIT_S)

    listed = await rt.inputs.list(conv)
    [notice] = notices(listed)
    assert [(i.input_id, i.state, i.queue_position) for i in listed[:2]] == [
        (notice.input_id, InputState.QUEUED, 3), (asked.input_id, InputState.QUEUED, 2),
    ]
    assert (notice.run_public_id, notice.task_key) == (
        (await rt.runs.list(conv))[0].run_id, task_key,
    )

    other_opened.set()
    _, second = await settled_runs(rt, conv, 2)
    assert second.trigger is StartKind.PERSON  # a person's turn reads the notice too
    events = await rt.events(conv)
    assert started_with(events, second.run_id) == [notice.input_id, asked.input_id]
    messages = await rt.transcript(conv)
    [note] = notes(messages)
    question = next(m for m in messages if m.input_id == asked.input_id)
    assert (note.input_id, note.run_id, question.run_id) == (
        notice.input_id, second.run_id, second.run_id,
    )
    assert note.seq < question.seq  # read first, though it arrived later
    assert (messages[-1].content, messages[-1].run_id) == ("Next.", second.run_id)
    assert [(i.input_id, i.queue_position, i.run_id) for i in await rt.inputs.list(conv)][1:] == [
        (notice.input_id, 3, second.run_id), (asked.input_id, 2, second.run_id),
    ]
    assert (await rt.tasks.get(conv, task_key)).consumed


# -- a notice that comes due inside a turn joins it after the step's results ---------------------


@dataclass
class EndsInsideAnotherTurn:
    """A job the first run started, ended while a second turn's gate call is open."""

    rt: Runtime
    conv: str
    first: Run
    task_key: str
    gate: Input
    """The person's input whose turn holds the gate."""
    opened: asyncio.Event


async def job_ends_inside_another_turn(
    runtimes: RuntimeFactory, tmp_path: Path, *rules: Rule
) -> EndsInsideAnotherTurn:
    flag = tmp_path / "job-may-end"
    gates = Gates()
    model = ScriptedModel(rules=[
        Rule({"text_equals": "start the job"}, background(waits_for(flag, "job ok"))),
        Rule({"tool_result": "shell"}, {"text": STARTED}),
        Rule({"text_equals": "open the gate"},
             {"tool_calls": [{"name": "gate", "arguments": {}}]}),
        Rule({"meta_kind": NOTIFICATION_KIND}, {"text": FINISHED}),
        *rules,
    ])
    rt = await runtimes(models=[model], tools=[gates.tool()])
    conv = (await rt.create_conversation(
        OWNER, Profile(model="scripted", tools=("shell", "gate"))
    )).conversation_id
    await rt.post(conv, "start the job")
    [first] = await settled_runs(rt, conv, 1)
    task_key = started_task(await rt.transcript(conv))
    gate = await rt.post(conv, "open the gate")
    entered, opened = gates.of(conv)
    await asyncio.wait_for(entered.wait(), WAIT_S)  # the second turn's call is open
    flag.touch()
    await task_ended(rt, conv, task_key)
    return EndsInsideAnotherTurn(rt, conv, first, task_key, gate, opened)


async def test_h1_a_notice_due_inside_a_turn_joins_it_after_the_step_results(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    ended = await job_ends_inside_another_turn(
        runtimes, tmp_path, Rule({"tool_result": "gate"}, {"text": "gate done"}))
    rt, conv, first, task_key, asked, opened = (
        ended.rt, ended.conv, ended.first, ended.task_key, ended.gate, ended.opened)
    # Accepted as it came due, but never read inside a call/result pair (T4).
    task = await rt.tasks.get(conv, task_key)
    assert (task.delivered, task.notification_seq) == (True, None)
    assert notes(await rt.transcript(conv)) == []
    opened.set()

    _, second = await settled_runs(rt, conv, 2)
    assert second.trigger is StartKind.PERSON  # no turn of its own: it joined this one
    messages = await rt.transcript(conv)
    gate_result = next(m for m in messages if m.role == "tool" and m.tool_name == "gate")
    [note] = notes(messages)
    assert note.seq == gate_result.seq + 1  # right after the step's results (T4)
    assert (messages[-1].content, messages[-1].run_id) == (FINISHED, second.run_id)
    [notice] = notices(await rt.inputs.list(conv))
    assert (notice.run_public_id, notice.task_key, notice.run_id) == (
        first.run_id, task_key, second.run_id,
    )
    assert note.input_id == notice.input_id
    events = await rt.events(conv)
    assert [a["input_id"] for a in accepted_notices(events)] == [notice.input_id]
    assert started_with(events, second.run_id) == [asked.input_id]  # it joined mid-way
    assert materialized(events, notice.input_id)["run_public_id"] == second.run_id


# -- M13: accepted when it comes due, while another turn runs; read at that turn's safe point --


async def test_m1_m2_m13_a_notice_due_while_another_turn_runs_is_accepted_and_listed_first(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    """A conversation-lifetime task of an earlier run ends while another turn holds the slot,
    inside a tool call: its notice is accepted into the inputs at once -- delivered with it,
    listed first, before a person's input queued meanwhile -- but not written into the
    transcript inside the call/result pair. The running turn reads it at its next safe point."""
    ended = await job_ends_inside_another_turn(
        runtimes, tmp_path, Rule({"text_equals": "what now?"}, {"text": "Next."}))
    rt, conv, first, task_key, gate = (
        ended.rt, ended.conv, ended.first, ended.task_key, ended.gate)
    asked = await rt.post(conv, "what now?")  # queued behind the running turn

    # Accepted and marked delivered together, as it came due (M13) -- listed first (M2).
    task = await rt.tasks.get(conv, task_key)
    assert (task.delivered, task.consumed, task.notification_seq) == (True, False, None)
    listed = await rt.inputs.list(conv)
    [notice] = notices(listed)
    assert [(i.input_id, i.state) for i in listed[:2]] == [
        (notice.input_id, InputState.QUEUED), (asked.input_id, InputState.QUEUED),
    ]
    assert (notice.run_public_id, notice.task_key) == (first.run_id, task_key)
    assert notice.queue_position < asked.queue_position  # it arrived first, too
    events = await rt.events(conv)
    assert [a["input_id"] for a in accepted_notices(events)] == [notice.input_id]
    assert notes(await rt.transcript(conv)) == []  # never inside a call/result pair (T4)

    ended.opened.set()
    _, second, third = await settled_runs(rt, conv, 3)
    # The running turn read it at its next safe point; the person's input took its own turn.
    messages = await rt.transcript(conv)
    gate_result = next(m for m in messages if m.role == "tool" and m.tool_name == "gate")
    [note] = notes(messages)
    assert (note.input_id, note.run_id, note.seq) == (
        notice.input_id, second.run_id, gate_result.seq + 1,
    )
    events = await rt.events(conv)
    assert started_with(events, second.run_id) == [gate.input_id]
    assert started_with(events, third.run_id) == [asked.input_id]
    assert [a["input_id"] for a in accepted_notices(events)] == [notice.input_id]
    assert materialized(events, notice.input_id)["run_public_id"] == second.run_id
    assert (await rt.tasks.get(conv, task_key)).consumed


@dataclass
class WaitsInALaterTurn:
    """Starts a background job in one turn; in a later turn waits for it with ``wait``."""

    flag: Path
    name: str = "later-waiter"
    task_key: str = ""

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
    ) -> ModelReply:
        newest = request.messages[-1]
        if newest.role == "user" and newest.content == "start the job":
            return ModelReply("", (ToolCall("c1", "shell", {
                "command": waits_for(self.flag, "job ok"), "background": True}),))
        if newest.role == "tool" and newest.tool_name == "shell":
            found = re.search(r"task (bg-[0-9a-f]+)", newest.content)
            assert found is not None
            self.task_key = found.group(1)
            return ModelReply(STARTED)
        if newest.role == "user" and newest.content == "wait for it":
            self.flag.touch()  # the job ends while the wait is open
            return ModelReply("", (ToolCall("c2", "wait", {
                "task_key": self.task_key, "timeout_s": WAIT_S}),))
        if newest.role == "tool" and newest.tool_name == "wait":
            return ModelReply(f"It {json.loads(newest.content)['state']}.")
        return ModelReply("unexpected notification")


async def test_t8_m13_a_notice_accepted_while_the_model_waits_is_withdrawn_by_the_wait(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    """A task of an earlier run ends while a later turn's ``wait`` for it is open: its notice
    is accepted as it comes due, and the wait's result, which shows the model the end, withdraws
    it before anything reads it -- the model is not told twice (T8)."""
    model = WaitsInALaterTurn(tmp_path / "job-may-end")
    rt = await runtimes(models=[model])
    conv = (await rt.create_conversation(
        OWNER, Profile(model=model.name, tools=("shell", "wait"))
    )).conversation_id
    await rt.post(conv, "start the job")
    await settled_runs(rt, conv, 1)
    await rt.post(conv, "wait for it")
    _, second = await settled_runs(rt, conv, 2)
    messages = await rt.transcript(conv)
    assert (messages[-1].content, messages[-1].run_id) == ("It exited.", second.run_id)
    assert notes(messages) == []
    task = await rt.tasks.get(conv, model.task_key)
    assert (task.reported_in_tool_result, task.delivered, task.notification_seq) == (
        True, False, None,
    )
    # Accepted as it came due (the end commits before the wait can see it), then withdrawn.
    [withdrawn] = notices(await rt.inputs.list(conv))
    assert (withdrawn.state, withdrawn.task_key) == (InputState.CANCELLED, model.task_key)
    await asyncio.wait_for(rt.settle(conv), WAIT_S)
    assert len(await rt.runs.list(conv)) == 2  # nothing left to wake for


# -- a turn-lifetime task: the synthesis round reads its notice as an input of the same run -----


async def test_h1_a_turn_task_notice_is_an_input_read_in_its_own_run(
    runtimes: RuntimeFactory,
) -> None:
    model = ScriptedModel(rules=[
        Rule({"text_equals": "check the build"}, background("sleep 0.2; echo ok", "turn")),
        Rule({"tool_result": "shell"}, {"text": "Checking; one moment."}),
        Rule({"meta_kind": NOTIFICATION_KIND}, {"text": "The check passed."}),
    ])
    rt = await runtimes(models=[model])
    conv = (await rt.create_conversation(OWNER, Profile(model="scripted", tools=("shell",)))
            ).conversation_id
    await rt.post(conv, "check the build")
    [run] = await settled_runs(rt, conv, 1)
    messages = await rt.transcript(conv)
    task_key = started_task(messages)
    [note] = notes(messages)
    [notice] = notices(await rt.inputs.list(conv))
    assert (notice.run_public_id, notice.task_key, notice.run_id, notice.state) == (
        run.run_id, task_key, run.run_id, InputState.MATERIALIZED,
    )
    assert (note.input_id, note.run_id) == (notice.input_id, run.run_id)
    events = await rt.events(conv)
    [accepted] = accepted_notices(events)
    assert (accepted["input_id"], accepted["run_public_id"], accepted["task_key"]) == (
        notice.input_id, run.run_id, task_key,
    )
    assert materialized(events, notice.input_id)["run_public_id"] == run.run_id
    assert (messages[-1].content, messages[-1].run_id) == ("The check passed.", run.run_id)


# -- T8: a task the model waited for gets no notice, so no input -------------------------------


async def test_h1_t8_a_task_the_model_waited_for_gets_no_task_result_input(
    runtimes: RuntimeFactory,
) -> None:
    rt = await runtimes(models=[Waiter()])
    conv = (await rt.create_conversation(
        OWNER, Profile(model="waiter", tools=("shell", "wait"))
    )).conversation_id
    await rt.post(conv, "deploy and wait")
    [_] = await settled_runs(rt, conv, 1)
    messages = await rt.transcript(conv)
    assert messages[-1].content == "It exited."
    task = await rt.tasks.get(conv, started_task(messages))
    assert (task.state.terminal, task.reported_in_tool_result, task.delivered) == (
        True, True, False,
    )
    assert notices(await rt.inputs.list(conv)) == []
    assert accepted_notices(await rt.events(conv)) == []


# -- T5, T6: a failed step keeps the notice, and it is never written twice ----------------------


@dataclass
class FailsOnTheNoticeOnce:
    """Starts a background build; the first request that shows its notice fails permanently."""

    name: str = "flaky"
    failed: bool = False

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
    ) -> ModelReply:
        newest = request.messages[-1]
        if newest.role == "user" and newest.content == "build it":
            return ModelReply("", (ToolCall("c1", "shell", {
                "command": "echo built", "background": True}),))
        if newest.role == "tool":
            return ModelReply(STARTED)
        if newest.meta.get("kind") == NOTIFICATION_KIND and not self.failed:
            self.failed = True
            raise ModelError(ModelErrorKind.PERMANENT, "refused", model=self.name)
        seen = [m for m in request.messages if m.meta.get("kind") == NOTIFICATION_KIND]
        return ModelReply(f"Seen {len(seen)} notice(s).")


async def test_h1_t5_t6_a_failed_step_keeps_the_notice_read_once_for_the_next_turn(
    runtimes: RuntimeFactory,
) -> None:
    rt = await runtimes(models=[FailsOnTheNoticeOnce()])
    conv = (await rt.create_conversation(OWNER, Profile(model="flaky", tools=("shell",)))
            ).conversation_id
    await rt.post(conv, "build it")
    _, woken = await settled_runs(rt, conv, 2)
    assert (woken.trigger, woken.status, woken.failure_code) == (
        StartKind.WAKE, RunStatus.FAILED, "model_permanent",
    )
    task = await rt.tasks.get(conv, started_task(await rt.transcript(conv)))
    # Delivered and read, not consumed; the error is kept (T5).
    assert (task.delivered, task.consumed, task.continuation_error) == (
        True, False, "model_permanent",
    )
    [notice] = notices(await rt.inputs.list(conv))
    assert (notice.state, notice.run_id) == (InputState.MATERIALIZED, woken.run_id)

    await rt.post(conv, "and?")  # a person's word: the conversation waited for one (C8)
    *_, answered = await settled_runs(rt, conv, 3)
    assert (answered.trigger, answered.status) == (StartKind.PERSON, RunStatus.COMPLETED)
    messages = await rt.transcript(conv)
    assert messages[-1].content == "Seen 1 notice(s)."  # in its history, not written again
    [note] = notes(messages)
    assert (note.input_id, note.seq) == (notice.input_id, task.notification_seq)
    assert notices(await rt.inputs.list(conv)) == [notice]  # one input, read once (T6)
    done = await rt.tasks.get(conv, task.task_key)
    assert (done.consumed, done.continuation_error) == (True, None)


# -- M14: stopping the source withdraws a notice not read yet ----------------------------------


async def test_h1_a_held_notice_waits_queued_and_a_stopped_source_withdraws_it(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    flag = tmp_path / "build-may-end"
    model = ScriptedModel(rules=[
        Rule({"text_equals": "build it"}, background(waits_for(flag, "built"))),
        Rule({"tool_result": "shell"}, {"text": STARTED}),
        Rule({"meta_kind": NOTIFICATION_KIND}, {"text": FINISHED}),
    ], default={"text": "Hello."})
    rt = await runtimes(models=[model])
    conv = (await rt.create_conversation(OWNER, Profile(model="scripted", tools=("shell",)))
            ).conversation_id
    await rt.post(conv, "build it")
    [first] = await settled_runs(rt, conv, 1)
    task_key = started_task(await rt.transcript(conv))
    await rt.stop(conv)  # no turn runs: continuation is suppressed until a person writes (C6)
    flag.touch()

    async def queued() -> bool:
        return any(i.state is InputState.QUEUED for i in notices(await rt.inputs.list(conv)))

    await eventually(queued, what="the notice accepted and held")
    [notice] = notices(await rt.inputs.list(conv))
    assert (await rt.inputs.list(conv))[0] == notice  # queued: listed first
    assert len(await rt.runs.list(conv)) == 1  # held by the stop: no wake-up ran

    assert await rt.runs.stop(conv, first.run_id) == [notice.input_id]
    [withdrawn] = notices(await rt.inputs.list(conv))
    assert withdrawn.state is InputState.CANCELLED
    task = await rt.tasks.get(conv, task_key)
    assert (task.cancelled, task.delivered, task.consumed) == (True, False, False)

    await rt.post(conv, "hello?")
    _, second = await settled_runs(rt, conv, 2)
    assert (second.trigger, second.status) == (StartKind.PERSON, RunStatus.COMPLETED)
    messages = await rt.transcript(conv)
    assert notes(messages) == []
    assert messages[-1].content == "Hello."
    await asyncio.wait_for(rt.settle(conv), WAIT_S)
    assert len(await rt.runs.list(conv)) == 2  # nothing left to wake for
