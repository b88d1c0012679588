"""A background task's span (B10): from its start to its end, in the trace of the turn whose
tool call started it."""

from __future__ import annotations

from tidings.support.tracing import CONVERSATION_ID, RUN_ID, Span, Tracing
from tidings.tasks.journal import TaskRecord
from tidings.tasks.notify import TaskState
from tidings.tasks.spawn import ProcessOutcome, ProcessState

_STATES = {
    ProcessState.EXITED: TaskState.EXITED,
    ProcessState.FAILED: TaskState.FAILED,
    ProcessState.TIMED_OUT: TaskState.TIMED_OUT,
    ProcessState.KILLED: TaskState.KILLED,
}


def task_span(
    tracing: Tracing, conversation_id: str, run_id: str | None, task_key: str, *,
    call_id: str | None, lifetime: str, start_time_us: int | None = None,
) -> Span:
    """A background task's span. Started inside the tool call that starts the task, it is that
    call's child: in the trace of the turn, though it may end long after the turn did. The
    parent is held in memory only; a task found lost after a restart gets a root span."""
    return tracing.start("tidings.task", {
        CONVERSATION_ID: conversation_id,
        RUN_ID: run_id,
        "tidings.task_key": task_key,
        "tidings.task.lifetime": lifetime,
        "gen_ai.tool.call.id": call_id,
    }, root=start_time_us is not None, start_time_us=start_time_us)


def task_ended(span: Span, outcome: ProcessOutcome) -> None:
    """How the process ended; anything but a zero exit is the task's failure. The command is
    not told (a task's reason for not starting names it)."""
    if not span.traced:
        return
    span.set({
        "tidings.task.state": _STATES[outcome.state].value,
        "process.pid": outcome.pid,
        "process.exit.code": outcome.exit_code,
        "tidings.task.signal": outcome.signal_name,
    })
    if outcome.state is ProcessState.FAILED:
        span.fail("the process could not start", error_type=outcome.state.value)
    elif not outcome.succeeded:
        span.fail(outcome.reason or f"exit code {outcome.exit_code}",
                  error_type=outcome.state.value)
    span.end()


def lost_span(tracing: Tracing, task: TaskRecord) -> None:
    """The span of a task found lost: the span its gone runtime started went with it, so
    this one is a root, from the task's start to now, with the same attributes."""
    span = task_span(tracing, task.conversation_id, task.run_id, task.task_key,
                     call_id=task.call_id, lifetime=task.lifetime,
                     start_time_us=task.started_at_us)
    span.set({"tidings.task.state": TaskState.LOST.value})
    span.fail("the runtime that ran it is gone: its outcome is unknown", error_type="lost")
    span.end()
