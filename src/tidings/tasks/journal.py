"""The task journal (T2-T9): task states and notification flags, changed only inside a unit
that holds the task's conversation (:class:`~tidings.records.transcript.ConversationTx`).

Every transition that can make a notification eligible -- the terminal state recorded, the
originating tool call's result committed, the task handed off -- is followed, in the same
transaction, by :func:`deliver_due` (or :func:`join` inside a turn). So whichever of "process
ended" and "tool result committed" lands last delivers the notification, and the conversation
lock makes it exactly once.

A notification enters the conversation through its single door (H1, M1): delivering it accepts
kernel mail of origin ``task_result`` (stamped with the originating run and the task key, and
announced by ``input_accepted``) and sets ``delivered`` -- together, in the unit where it comes
due (M13), whether or not a turn holds the slot: the queue lists it, in read order, from then
on (M2). The run that reads it materializes it (:func:`read`) as the transcript's user-role
notice, ``meta.kind = task_notification``, and the task keeps that message's position. That
happens only at a safe point: while any tool call of the conversation is open, nothing is read
(the turn that holds the call reads it at its next safe point; a turn that starts reads it
first). One exception waits to be accepted: the running turn's own conversation-lifetime tasks
come due as its reply is final (M4).

This module holds the notification's flags and its way in: delivered, read, joined. The row
itself and its states (started, where it runs, adopted, finished) are :mod:`.states`; this
module offers those names too, so the journal is one import.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from tidings.mail import queue
from tidings.mail.door import Door, kernel_author
from tidings.records.results import Drop, dropped_from
from tidings.records.rows import input_from_row
from tidings.records.transcript import ConversationTx
from tidings.store import Tx
from tidings.tasks.notify import ProcessFacts, is_eligible, is_notice, render
from tidings.tasks.states import (
    TaskRecord,
    adopt,
    finish,
    get,
    get_ahead,
    of_run,
    open_references,
    record_mcp_task,
    record_process,
    set_flags,
    start,
    task_from_row,
)
from tidings.types import ConversationStatus, Input, Origin


def hand_off(cx: ConversationTx, task: TaskRecord) -> TaskRecord:
    """The turn that owned a turn-lifetime task hands its notification to the conversation:
    it is delivered like any other, at the unit's safe point if it is due (M4's synthesis
    round, or as the turn ends)."""
    if task.handed_off:
        return task
    return set_flags(cx, replace(task, handed_off=True))


def mark_committed(cx: ConversationTx, task: TaskRecord) -> TaskRecord:
    """The originating tool call's first result is committed (call in that same unit); the
    notification, when due, is delivered at the unit's safe point."""
    if task.committed:
        return task
    return set_flags(cx, replace(task, committed=True))


def commit_calls(cx: ConversationTx, run_id: str, call_ids: set[str]) -> None:
    """Calls of ``run_id`` were answered without their tool's output (``outcome_unknown`` after
    a crash, ``cancelled`` as a turn ended): that answer is their first result, so the tasks
    they started are committed -- and told when they end, like any other (T2, T3, T9)."""
    if not call_ids:
        return
    for task in of_run(cx, run_id):
        if task.call_id in call_ids and not task.committed:
            mark_committed(cx, task)


def mark_reported(cx: ConversationTx, task: TaskRecord) -> TaskRecord:
    """The model read the terminal state in a tool result (``wait``, ``task_status``): no
    notification is owed any more (T8). A notice accepted but not read yet is withdrawn from
    the queue; one read already stands (the model saw it first)."""
    if task.reported_in_tool_result or task.notification_seq is not None or task.consumed:
        return task
    if task.delivered:
        accepted = [i for i in queued_notices(cx) if i.task_key == task.task_key]
        if not accepted or not queue.cancel_queued(cx, accepted[0].input_id):
            return task
        task = replace(task, delivered=False)
    cx.record_event(
        "task_status",
        {"task_key": task.task_key, "event_id": task.event_id, "state": task.state.value,
         "resolved_by": {"kind": "tool_result"}},
        task.run_id,
    )
    return set_flags(cx, replace(task, reported_in_tool_result=True))


def cancel(cx: ConversationTx, task: TaskRecord) -> TaskRecord:
    """No notification, ever (its run was stopped)."""
    return task if task.cancelled else set_flags(cx, replace(task, cancelled=True))


def cancel_run(cx: ConversationTx, run_id: str) -> None:
    """A stopped source run's tasks notify nothing more (M14): a notification not delivered
    yet is cancelled, and so is one accepted but not read yet -- the stop withdrew its input
    with the run's other queued supplementary inputs (``queue.cancel_supplementary``, earlier in
    the same unit), so it was never delivered to the model. A notice read already stands."""
    for task in of_run(cx, run_id):
        if not task.delivered:
            cancel(cx, task)
        elif task.notification_seq is None and not task.consumed and not task.cancelled:
            set_flags(cx, replace(task, delivered=False, cancelled=True))


def consume(cx: ConversationTx, tasks: Sequence[TaskRecord]) -> None:
    """The model step that saw these notifications succeeded and is being committed (T5)."""
    for task in tasks:
        if task.delivered and not task.consumed:
            set_flags(cx, replace(task, consumed=True, continuation_error=None))


def keep_unconsumed(cx: ConversationTx, tasks: Sequence[TaskRecord], error: str) -> None:
    """The step failed: delivered stays, consumed does not, and the error is kept (T5)."""
    for task in tasks:
        if task.delivered and not task.consumed:
            set_flags(cx, replace(task, continuation_error=error[:500]))


def unconsumed_ahead(conversation_id: str) -> Callable[[Tx], None]:
    """What to tell the lock (:meth:`ConversationTx.lock`'s ``ahead``) when the unit's first
    read under it is :func:`unconsumed`: a dialect may send the two together."""

    def ahead(tx: Tx) -> None:
        tx.read_ahead("unconsumed_tasks", conversation_id=conversation_id)

    return ahead


def unconsumed(cx: ConversationTx) -> list[TaskRecord]:
    """Notifications read into the transcript and not yet handled (as of the unit's start, and
    its own writes); one accepted but not read yet is not among them."""
    if not cx.unconsumed_notifications:
        return []
    rows = cx.tx.all("unconsumed_tasks", conversation_id=cx.conversation_id)
    return [task_from_row(r) for r in rows]


def deliver_due(
    cx: ConversationTx, door: Door, *, during_run: str | None = None
) -> list[TaskRecord]:
    """Deliver every eligible, undelivered notification of the conversation through its door:
    each becomes a queued ``task_result`` input (kernel mail: no admission checks, always
    ``queue``) and ``delivered``, in the caller's unit -- together, so it is never accepted
    twice (T6, M13). Accepting writes nothing into the transcript, so an open tool call does
    not hold it back; reading it waits for a safe point. A full queue leaves the rest
    undelivered, for the sweep (M13); a tombstoned conversation owes nothing. Returns what was
    delivered.

    ``during_run``: that run's turn holds the slot. Its own conversation-lifetime tasks then
    wait for its final reply and answer in a supplementary turn, even when they ended earlier
    (M4); other runs' tasks are accepted now.
    """
    return [task for task, _ in _deliver(cx, door, during_run)]


def accept_due(cx: ConversationTx, door: Door) -> list[TaskRecord]:
    """:func:`deliver_due` from a unit outside any turn that changed tasks (a task's end
    recorded, a lost task) beside a slot it may not take: what came due is accepted now,
    whoever holds the slot -- except what the running turn's own reply must come first for
    (M4). A unit that changed no task made nothing due."""
    if not cx.changed_tasks:
        return []
    _, _, running = cx.slot.holder()
    return deliver_due(cx, door, during_run=None if cx.slot.free() else running)


def join(cx: ConversationTx, door: Door, run_id: str) -> list[int]:
    """At a safe point inside ``run_id``'s turn (after a step's tool results, or in its
    synthesis round): deliver what is due and have that run read every notice waiting in the
    queue at once -- those accepted now and those accepted while it ran -- as a steer joins
    it. Nothing is read while a tool call is open. Returns the notices' message positions."""
    delivered = [item for _, item in _deliver(cx, door, run_id)]
    if cx.open_tool_calls():
        return []
    waiting = delivered
    if cx.unconsumed_notifications:
        # Notices accepted in earlier units (while a call was open, or by a task's end).
        known = {i.input_id for i in delivered}
        waiting = [*(i for i in queued_notices(cx) if i.input_id not in known), *delivered]
    return read(cx, waiting, run_id)


def queued_notices(cx: ConversationTx) -> list[Input]:
    """Notices accepted at the door and not read yet, in arrival order."""
    if cx.queued_count == 0:
        return []
    return [n for r in cx.tx.all("queued_notices", conversation_id=cx.conversation_id)
            if is_notice(n := input_from_row(r))]


def read(cx: ConversationTx, notices: Sequence[Input], run_id: str) -> list[int]:
    """``run_id`` reads these queued notices, in the caller's unit at a safe point: each
    becomes the transcript's user-role message of that run (``meta.kind =
    task_notification``, ``input_materialized``), and its task keeps the message's position.
    A notice is read once: materializing refuses an input that is no longer queued (T6)."""
    seqs = []
    for item in notices:
        assert is_notice(item), item
        seq = queue.materialize(cx, item, run_id)
        cx.tx.run_later("set_notification_seq", conversation_id=cx.conversation_id,
                        task_key=item.task_key, seq=seq)
        seqs.append(seq)
    return seqs


def _deliver(
    cx: ConversationTx, door: Door, during_run: str | None
) -> list[tuple[TaskRecord, Input]]:
    if cx.conversation.status is ConversationStatus.TOMBSTONED:
        return []  # a deleted conversation owes nothing
    if cx.undelivered_notifications:
        candidates = [task_from_row(row) for row in
                      cx.tx.all("undelivered_tasks", conversation_id=cx.conversation_id)]
    else:
        # Nothing waited as the unit began: only a task this unit changed can be due.
        candidates = sorted(
            (t for t in cx.changed_tasks.values()
             if t.state.terminal and not t.delivered and not t.cancelled),
            key=lambda t: (t.ended_at_us or 0, t.task_id),
        )
    delivered: list[tuple[TaskRecord, Input]] = []
    for task in candidates:
        if not is_eligible(task.flags):
            continue
        if during_run is not None and task.run_id == during_run and (
            task.lifetime == "conversation"
        ):
            continue  # after the run's final reply (M4)
        if door.room(cx) <= 0:
            break  # the queue is full: the sweep offers the rest again (M13)
        assert task.event_id is not None
        text, meta = render(ProcessFacts(
            task_key=task.task_key, event_id=task.event_id, state=task.state,
            exit_code=task.exit_code, signal=task.signal, duration_ms=task.duration_ms or 0,
            stdout_bytes=task.stdout_bytes, stderr_bytes=task.stderr_bytes,
            result_id=task.result_id,
            result_lifetime=None if task.result_id is None else "durable",
            excerpt=task.excerpt, excerpt_truncated=task.excerpt_truncated,
            output_dropped=output_dropped(cx, task),
            mcp=None if task.mcp_server is None else {
                "server": task.mcp_server, "tool": task.mcp_tool or "",
                "task_id": task.mcp_task_id or ""},
        ))
        item = door.deliver(
            cx, text, origin=Origin.TASK_RESULT, authored_by=kernel_author(cx),
            sender_conversation_id=None, run_public_id=task.run_id, task_key=task.task_key,
            meta=meta,
        )
        cx.notified = True
        cx.record_event(
            "task_status",
            {"task_key": task.task_key, "event_id": task.event_id, "state": task.state.value,
             "delivered": True, "input_id": item.input_id,
             "resolved_by": {"kind": "notification", "input_id": item.input_id}},
            task.run_id,
        )
        delivered.append((set_flags(cx, replace(task, delivered=True)), item))
    return delivered


def output_dropped(cx: ConversationTx, task: TaskRecord) -> tuple[Drop, ...]:
    """What the task's stored result had to drop (R1). Only an output whose excerpt left
    something out can have lost bytes, so a whole one costs no read."""
    if task.result_id is None or not task.excerpt_truncated:
        return ()
    return dropped_from(cx.tx, task.result_id)


__all__ = (
    "TaskRecord", "accept_due", "adopt", "cancel", "cancel_run", "commit_calls", "consume",
    "deliver_due", "finish", "get", "get_ahead", "hand_off", "join", "keep_unconsumed",
    "mark_committed", "mark_reported", "of_run", "open_references", "output_dropped",
    "queued_notices", "read", "record_mcp_task", "record_process", "start", "task_from_row",
    "unconsumed", "unconsumed_ahead",
)
