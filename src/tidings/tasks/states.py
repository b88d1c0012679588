"""A task's journal row and its states: started, where it runs, adopted, finished (T2-T9).

Like the rest of the task journal (:mod:`tidings.tasks.journal`, which offers these as its
own), each write runs inside a unit that holds the task's conversation
(:class:`~tidings.records.transcript.ConversationTx`). A task's notification flags are written
by :func:`set_flags`; which of them change, and when a notification is delivered and read, is
the journal's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from tidings.records.transcript import ConversationTx
from tidings.store import Row, Tx
from tidings.tasks.notify import NotificationFlags, Notify, TaskState
from tidings.types import ConversationId, new_id


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """One journal row."""

    task_id: str
    conversation_id: ConversationId
    task_key: str
    run_id: str | None
    call_id: str | None
    command: str
    notify: Notify
    lifetime: str
    state: TaskState
    exit_code: int | None
    signal: str | None
    event_id: str | None
    committed: bool
    handed_off: bool
    delivered: bool
    consumed: bool
    cancelled: bool
    reported_in_tool_result: bool
    continuation_error: str | None
    notification_seq: int | None
    result_id: str | None
    stdout_bytes: int
    stderr_bytes: int
    excerpt: bytes
    excerpt_truncated: bool
    duration_ms: int | None
    started_at_us: int = 0
    ended_at_us: int | None = None
    mcp_server: str | None = None
    """An MCP server's task (its work runs there): the server, the tool and its task id."""
    mcp_tool: str | None = None
    mcp_task_id: str | None = None
    instance_id: str | None = None
    """The instance that follows the task (started it, or adopted it)."""
    direct: bool = False
    """Known to be a direct turn's task (a person's, an agent's, the kernel's mail) or one
    started outside any run, whose notification wakes the conversation (L3), as the store
    decides it; False also when the row was read without it."""

    @property
    def flags(self) -> NotificationFlags:
        return NotificationFlags(
            state=self.state, event_id=self.event_id, notify=self.notify,
            committed=self.committed, handed_off=self.handed_off, delivered=self.delivered,
            cancelled=self.cancelled, reported_in_tool_result=self.reported_in_tool_result,
        )


def task_from_row(row: Row) -> TaskRecord:
    excerpt = row["excerpt"]
    return TaskRecord(
        task_id=row["task_id"],
        conversation_id=ConversationId(row["conversation_id"]),
        task_key=row["task_key"],
        run_id=row["run_id"],
        call_id=row["call_id"],
        command=row["command"],
        notify=Notify(row["notify"]),
        lifetime=row["lifetime"],
        state=TaskState(row["state"]),
        exit_code=row["exit_code"],
        signal=row["signal"],
        event_id=row["event_id"],
        committed=bool(row["committed"]),
        handed_off=bool(row["handed_off"]),
        delivered=bool(row["delivered"]),
        consumed=bool(row["consumed"]),
        cancelled=bool(row["cancelled"]),
        reported_in_tool_result=bool(row["reported_in_tool_result"]),
        continuation_error=row["continuation_error"],
        notification_seq=row["notification_seq"],
        result_id=row["result_id"],
        stdout_bytes=int(row["stdout_bytes"]),
        stderr_bytes=int(row["stderr_bytes"]),
        excerpt=b"" if excerpt is None else bytes(excerpt),
        excerpt_truncated=bool(row["excerpt_truncated"]),
        duration_ms=row["duration_ms"],
        started_at_us=int(row["started_at_us"]),
        ended_at_us=row["ended_at_us"],
        direct=bool(row.get("direct")),
        mcp_server=row.get("mcp_server"),
        mcp_tool=row.get("mcp_tool"),
        mcp_task_id=row.get("mcp_task_id"),
        instance_id=row.get("instance_id"),
    )


def start(
    cx: ConversationTx,
    *,
    task_key: str,
    command: str,
    instance_id: str,
    run_id: str | None = None,
    call_id: str | None = None,
    notify: Notify = Notify.ON_EXIT,
    lifetime: str = "conversation",
    handed_off: bool = True,
) -> str:
    """Record a started task; returns its id. A task_key is unique in its conversation."""
    task_id = new_id("task")
    cx.tx.run_later(
        "insert_task", task_id=task_id, conversation_id=cx.conversation_id, task_key=task_key,
        run_id=run_id, call_id=call_id, command=command, notify=notify.value,
        lifetime=lifetime, handed_off=int(handed_off), instance_id=instance_id,
        now_us=cx.now_us,
    )
    return task_id


def record_process(
    cx: ConversationTx, task: TaskRecord, *, pid: int, host: str, identity: str | None
) -> None:
    """Where the task's process runs: found again, and stopped, if its runtime dies (T9)."""
    cx.tx.run_later(
        "set_task_process", task_id=task.task_id, pid=pid, host=host, process_started=identity
    )


def record_mcp_task(
    cx: ConversationTx, task_id: str, *, server: str, tool: str, mcp_task_id: str
) -> None:
    """The task's work runs on an MCP server, under that server's task id (B5): written with
    the task's start, so that a runtime started after a crash can follow it again."""
    cx.tx.run_later("insert_mcp_task", task_id=task_id, server=server, tool=tool,
                    mcp_task_id=mcp_task_id)


def adopt(cx: ConversationTx, task: TaskRecord, *, gone_instance_id: str,
          instance_id: str) -> bool:
    """``instance_id`` follows the task from now on, in place of the gone instance that started
    it (an MCP server's task outlives the runtime that started it). Whether it did: only one
    instance adopts a task, and only a running one."""
    return cx.tx.execute("adopt_task", task_id=task.task_id, instance_id=instance_id,
                         gone_instance_id=gone_instance_id) == 1


def get(cx: ConversationTx, task_key: str) -> TaskRecord | None:
    row = cx.tx.one("get_task", conversation_id=cx.conversation_id, task_key=task_key)
    return None if row is None else task_from_row(row)


def get_ahead(conversation_id: str, task_key: str) -> Callable[[Tx], None]:
    """What to tell the lock (:meth:`ConversationTx.lock`'s ``ahead``) when the unit's first
    read under it is :func:`get` of ``task_key``: a dialect may send the two together."""

    def ahead(tx: Tx) -> None:
        tx.read_ahead("get_task", conversation_id=conversation_id, task_key=task_key)

    return ahead


def finish(
    cx: ConversationTx,
    task: TaskRecord,
    *,
    state: TaskState,
    exit_code: int | None = None,
    signal: str | None = None,
    result_id: str | None = None,
    stdout_bytes: int = 0,
    stderr_bytes: int = 0,
    excerpt: bytes = b"",
    excerpt_truncated: bool = False,
    duration_ms: int | None = None,
) -> TaskRecord:
    """Record the terminal state and its stable event id (once). The notification, when due,
    is delivered by :func:`~tidings.tasks.journal.deliver_due` at the unit's safe point: the
    unit that takes the conversation's slot, or the turn that holds it, at its own next safe
    point or as it ends.
    """
    if not state.terminal:
        raise ValueError("finish records a terminal state")
    if task.state.terminal:
        return task  # recorded already: the first terminal state stands
    finished = replace(
        task, state=state, exit_code=exit_code, signal=signal, event_id=new_id("evt"),
        result_id=result_id, stdout_bytes=stdout_bytes, stderr_bytes=stderr_bytes,
        excerpt=excerpt, excerpt_truncated=excerpt_truncated, duration_ms=duration_ms,
        ended_at_us=cx.now_us,
    )
    cx.tx.run_later(
        "finish_task", task_id=task.task_id, state=state.value, exit_code=exit_code,
        signal=signal, event_id=finished.event_id, result_id=result_id,
        stdout_bytes=stdout_bytes, stderr_bytes=stderr_bytes, excerpt=excerpt,
        excerpt_truncated=int(excerpt_truncated), duration_ms=duration_ms, now_us=cx.now_us,
        expect=1, mismatch=lambda: ValueError(f"task {task.task_key} is not running"),
    )
    cx.changed_tasks[finished.task_id] = finished
    return finished


def of_run(cx: ConversationTx, run_id: str) -> list[TaskRecord]:
    """The tasks a run started."""
    rows = cx.tx.all("tasks_of_run", conversation_id=cx.conversation_id, run_id=run_id)
    return [task_from_row(r) for r in rows]


def set_flags(cx: ConversationTx, task: TaskRecord) -> TaskRecord:
    """Write ``task``'s notification flags, in the caller's unit; the unit knows it changed."""
    cx.changed_tasks[task.task_id] = task
    cx.tx.run_later(
        "set_task_flags", task_id=task.task_id, committed=int(task.committed),
        handed_off=int(task.handed_off), delivered=int(task.delivered),
        consumed=int(task.consumed), cancelled=int(task.cancelled),
        reported_in_tool_result=int(task.reported_in_tool_result),
        continuation_error=task.continuation_error, notification_seq=task.notification_seq,
    )
    return task


def open_references(cx: ConversationTx) -> list[dict[str, object]]:
    """The tasks a compaction must not erase (T7): running, or with a notification still owed
    or unhandled -- as references the hand-off carries."""
    return [
        {"task_key": r["task_key"], "state": r["state"], "event_id": r["event_id"],
         "result_id": r["result_id"], "notification_delivered": bool(r["delivered"])}
        for r in cx.tx.all("open_tasks", conversation_id=cx.conversation_id)
    ]


__all__ = (
    "TaskRecord", "adopt", "finish", "get", "get_ahead", "of_run", "open_references",
    "record_mcp_task", "record_process", "set_flags", "start", "task_from_row",
)
