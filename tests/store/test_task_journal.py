"""T2-T8 in the journal, on both backends: a notification is delivered once, by whichever of
"process ended" and "tool result committed" lands last, only at a safe point, and never twice.

Delivering accepts the notice at the conversation's door (a queued ``task_result`` input); the
run that reads it writes it into the transcript (H1). ``Journal.read`` stands for that run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from tidings.clock import ManualClock
from tidings.conversations.catalog import Conversations
from tidings.mail import queue
from tidings.mail.door import Door, DoorConfig
from tidings.models.base import ToolCall
from tidings.records.transcript import ConversationTx
from tidings.scheduler.slot import recover_interrupted
from tidings.store import Store, Tx
from tidings.tasks import journal
from tidings.tasks.journal import TaskRecord
from tidings.tasks.notify import NOTIFICATION_KIND, TaskState, is_notice
from tidings.types import Input, Message, Profile

T = TypeVar("T")


class Journal:
    def __init__(self, store: Store, clock: ManualClock, conversation_id: str) -> None:
        self.store = store
        self.clock = clock
        self.conv = conversation_id
        self.door = Door(store, clock)

    async def unit(self, body: Callable[[ConversationTx], T]) -> T:
        def run(tx: Tx) -> T:
            cx = ConversationTx.lock(tx, self.conv, self.clock)
            result = body(cx)
            cx.save()
            return result

        return await self.store.transact(run, route=self.conv)

    async def call_and_start(self, call_id: str, task_key: str) -> None:
        def body(cx: ConversationTx) -> None:
            cx.append_user("build it")
            cx.append_assistant("", tool_calls=[ToolCall(call_id, "shell", {"cmd": "make"})])
            journal.start(cx, task_key=task_key, command="make", instance_id="inst_test",
                          call_id=call_id)

        await self.unit(body)

    async def task(self, task_key: str) -> TaskRecord:
        found = await self.unit(lambda cx: journal.get(cx, task_key))
        assert found is not None
        return found

    async def finish(self, task_key: str, state: TaskState = TaskState.EXITED) -> TaskRecord:
        def body(cx: ConversationTx) -> TaskRecord:
            task = journal.get(cx, task_key)
            assert task is not None
            finished = journal.finish(cx, task, state=state, exit_code=0, stdout_bytes=5,
                                      excerpt=b"done\n")
            return self.delivered(cx, finished)

        return await self.unit(body)

    def delivered(self, cx: ConversationTx, task: TaskRecord) -> TaskRecord:
        """The unit's safe point: what is due is delivered; the task as it is now."""
        return next((t for t in journal.deliver_due(cx, self.door)
                     if t.task_key == task.task_key), task)

    async def notices(self) -> list[Input]:
        """The queued task notices, in read order."""
        return [i for i in await self.door.inputs(self.conv) if is_notice(i)
                and i.state.value == "queued"]

    async def read(self) -> list[Message]:
        """A run reads the queued notices (at its start, a safe point); the transcript."""
        queued = await self.notices()
        await self.unit(lambda cx: journal.read(cx, queued, "run_reader"))
        return await self.transcript()

    async def result_committed(self, call_id: str, task_key: str) -> TaskRecord:
        def body(cx: ConversationTx) -> TaskRecord:
            cx.append_tool_result(call_id, f"started {task_key}", tool_name="shell")
            task = journal.get(cx, task_key)
            assert task is not None
            return self.delivered(cx, journal.mark_committed(cx, task))

        return await self.unit(body)

    async def transcript(self) -> list[Message]:
        return await Conversations(self.store, self.clock).transcript(self.conv)


async def new_journal(store: Store, clock: ManualClock) -> Journal:
    conv = await Conversations(store, clock).create("alice", Profile(model="m"))
    return Journal(store, clock, conv.conversation_id)


def notifications(messages: list[Message]) -> list[Message]:
    return [m for m in messages if m.meta.get("kind") == NOTIFICATION_KIND]


def assert_after_result(messages: list[Message], call_id: str) -> None:
    [note] = notifications(messages)
    result = next(m for m in messages if m.tool_call_id == call_id)
    assert note.seq > result.seq


async def test_t3_process_ends_before_the_result_commits_one_notification_after_it(
    store: Store, clock: ManualClock
) -> None:
    j = await new_journal(store, clock)
    await j.call_and_start("call_1", "build")
    finished = await j.finish("build")
    assert finished.event_id is not None
    assert not finished.delivered  # not committed yet: nothing between the call and its result
    assert notifications(await j.transcript()) == []
    after = await j.result_committed("call_1", "build")
    assert after.delivered
    [notice] = await j.notices()  # accepted at the door, not read yet
    assert (notice.task_key, notice.meta["event_id"]) == ("build", finished.event_id)
    assert notifications(await j.transcript()) == []
    messages = await j.read()
    assert_after_result(messages, "call_1")
    assert notifications(messages)[0].meta["event_id"] == finished.event_id
    assert notifications(messages)[0].input_id == notice.input_id


async def test_t3_result_commits_before_the_process_ends_one_notification_after_it(
    store: Store, clock: ManualClock
) -> None:
    j = await new_journal(store, clock)
    await j.call_and_start("call_1", "build")
    committed = await j.result_committed("call_1", "build")
    assert not committed.delivered  # still running
    finished = await j.finish("build")
    assert finished.delivered
    assert_after_result(await j.read(), "call_1")


async def test_t4_m13_open_call_of_another_step_accepts_the_notice_and_defers_reading_it(
    store: Store, clock: ManualClock
) -> None:
    j = await new_journal(store, clock)
    await j.call_and_start("call_1", "build")
    await j.result_committed("call_1", "build")
    await j.unit(lambda cx: cx.append_assistant(
        "", tool_calls=[ToolCall("call_2", "shell", {"cmd": "ls"})]))
    finished = await j.finish("build")
    assert finished.delivered  # accepted as it came due, call_2 open or not (M13)
    [notice] = await j.notices()
    # call_2 is open: not a safe point, nothing is read into the transcript (T4).
    assert await j.unit(lambda cx: journal.join(cx, j.door, "run_reader")) == []
    assert notifications(await j.transcript()) == []
    seqs = await j.unit(lambda cx: (
        cx.append_tool_result("call_2", "a b c", tool_name="shell"),
        journal.join(cx, j.door, "run_reader"))[1])
    messages = await j.transcript()
    assert_after_result(messages, "call_2")
    [note] = notifications(messages)
    assert (seqs, note.input_id) == ([note.seq], notice.input_id)
    assert await j.notices() == []


async def test_t6_delivery_is_never_repeated(store: Store, clock: ManualClock) -> None:
    j = await new_journal(store, clock)
    await j.call_and_start("call_1", "build")
    await j.finish("build")
    await j.result_committed("call_1", "build")
    again = await j.unit(lambda cx: journal.deliver_due(cx, j.door))
    assert again == []
    assert len(await j.notices()) == 1
    [note] = notifications(await j.read())
    assert await j.notices() == []  # read once: nothing left to read again
    assert (await j.task("build")).notification_seq == note.seq


async def test_t2_first_terminal_state_and_event_id_stand(
    store: Store, clock: ManualClock
) -> None:
    j = await new_journal(store, clock)
    await j.call_and_start("call_1", "build")
    first = await j.finish("build", TaskState.TIMED_OUT)
    second = await j.finish("build", TaskState.EXITED)
    assert second.state is TaskState.TIMED_OUT
    assert second.event_id == first.event_id
    assert (await j.task("build")).state is TaskState.TIMED_OUT


async def test_t8_terminal_state_read_in_a_tool_result_is_not_notified(
    store: Store, clock: ManualClock
) -> None:
    j = await new_journal(store, clock)
    await j.call_and_start("call_1", "build")

    def reported(cx: ConversationTx) -> None:
        task = journal.get(cx, "build")
        assert task is not None
        journal.mark_reported(cx, task)

    await j.unit(reported)
    await j.finish("build")
    await j.result_committed("call_1", "build")
    assert notifications(await j.transcript()) == []
    assert not (await j.task("build")).delivered


async def test_t5_consumed_only_when_handled_and_errors_kept(
    store: Store, clock: ManualClock
) -> None:
    j = await new_journal(store, clock)
    await j.call_and_start("call_1", "build")
    await j.finish("build")
    await j.result_committed("call_1", "build")
    assert await j.unit(journal.unconsumed) == []  # accepted, not read: nothing handled yet
    await j.read()
    pending = await j.unit(journal.unconsumed)
    assert [t.task_key for t in pending] == ["build"]
    await j.unit(lambda cx: journal.keep_unconsumed(cx, pending, "model_unavailable"))
    kept = await j.task("build")
    assert kept.delivered
    assert not kept.consumed
    assert kept.continuation_error == "model_unavailable"
    await j.unit(lambda cx: journal.consume(cx, pending))
    done = await j.task("build")
    assert done.consumed
    assert done.continuation_error is None
    assert await j.unit(journal.unconsumed) == []


async def test_t2_a_call_answered_outcome_unknown_commits_the_task_it_started(
    store: Store, clock: ManualClock
) -> None:
    """The runtime died between a task's start and its call's result: recovery answers the
    call ``outcome_unknown`` -- its first result -- so the task is committed and its end is
    still told, once, after that answer (found by the crash torture)."""
    j = await new_journal(store, clock)

    def started(cx: ConversationTx) -> None:
        cx.append_user("build it")
        cx.append_assistant("", run_id="run_dead",
                            tool_calls=[ToolCall("call_1", "shell", {"cmd": "make"})])
        journal.start(cx, task_key="build", command="make", instance_id="inst_dead",
                      run_id="run_dead", call_id="call_1")

    await j.unit(started)
    lost = await j.finish("build", TaskState.LOST)
    assert not lost.committed
    assert not lost.delivered
    await j.unit(lambda cx: (recover_interrupted(cx), journal.deliver_due(cx, j.door)))
    task = await j.task("build")
    assert task.committed
    assert task.delivered
    messages = await j.read()
    answer = next(m for m in messages if m.tool_call_id == "call_1")
    assert answer.meta["status"] == "outcome_unknown"
    assert_after_result(messages, "call_1")
    assert notifications(messages)[0].meta["state"] == "lost"


async def test_h1_a_notice_is_kernel_mail_through_the_door_with_its_stamps(
    store: Store, clock: ManualClock
) -> None:
    j = await new_journal(store, clock)

    def started(cx: ConversationTx) -> None:
        cx.append_user("build it")
        cx.append_assistant("", run_id="run_source",
                            tool_calls=[ToolCall("call_1", "shell", {"cmd": "make"})])
        journal.start(cx, task_key="build", command="make", instance_id="inst_test",
                      run_id="run_source", call_id="call_1")

    await j.unit(started)
    await j.result_committed("call_1", "build")
    finished = await j.finish("build")
    assert finished.delivered
    [notice] = await j.notices()
    assert (notice.origin.value, notice.run_public_id, notice.task_key) == (
        "task_result", "run_source", "build",
    )
    assert (notice.delivery_mode.value, notice.authored_by.handle) == ("queue", "alice")
    assert notice.meta["event_id"] == finished.event_id


async def test_h1_a_full_queue_leaves_the_notice_undelivered_until_there_is_room(
    store: Store, clock: ManualClock
) -> None:
    """The queue's bound holds for the kernel's mail too; a full queue refuses nothing that
    the task owes -- it is delivered once there is room (the sweep finds it: M13)."""
    j = await new_journal(store, clock)
    j.door = Door(store, clock, DoorConfig(queue_limit=1))
    waiting = await j.door.post(j.conv, "a person's input that waits")
    await j.call_and_start("call_1", "build")
    await j.result_committed("call_1", "build")
    finished = await j.finish("build")
    assert not finished.delivered  # the queue is full
    assert await j.notices() == []

    def read_the_person(cx: ConversationTx) -> list[TaskRecord]:
        [queued] = queue.queued_inputs(cx, 10)
        assert queued.input_id == waiting.input_id
        queue.materialize(cx, queued, "run_reader")
        return journal.deliver_due(cx, j.door)

    assert [t.task_key for t in await j.unit(read_the_person)] == ["build"]
    assert len(await j.notices()) == 1
    assert_after_result(await j.read(), "call_1")
