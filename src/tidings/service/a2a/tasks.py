"""A2A tasks read from the runtime: a task is the input an A2A message made, followed to the run
that read it; its context is the conversation.

Pure mapping, apart from :func:`read_task` and :func:`histories`, which read the runtime:

- a run's status is the task's state (:func:`task_state`);
- the run's transcript is the task's history: a person's words are ``user`` messages, and
  everything else -- the answer, tool calls and their results, the runtime's own notices -- is
  an ``agent`` message whose metadata says what it is (``tidings.role``, ``tidings.origin``);
- the run's final answer is the task's one artifact, ``answer``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from a2a.types.a2a_pb2 import (
    Artifact,
    Message,
    Part,
    Role,
    Task,
    TaskState,
    TaskStatus,
)
from google.protobuf.timestamp_pb2 import Timestamp

from tidings.conversations.approvals import Approval
from tidings.conversations.questions import Question
from tidings.runtime.root import Runtime
from tidings.types import Answer, Input, InputState, Origin, RunStatus
from tidings.types import Message as Said

MESSAGE_ID_META = "a2a_message_id"
"""The input's meta key that keeps the id the A2A client gave its message."""
ANSWER_ARTIFACT = "answer"

_STATES: Mapping[RunStatus, TaskState] = {
    RunStatus.QUEUED: TaskState.TASK_STATE_SUBMITTED,
    RunStatus.RUNNING: TaskState.TASK_STATE_WORKING,
    RunStatus.AWAITING_APPROVAL: TaskState.TASK_STATE_INPUT_REQUIRED,
    RunStatus.COMPLETED: TaskState.TASK_STATE_COMPLETED,
    RunStatus.STOPPED: TaskState.TASK_STATE_CANCELED,
    RunStatus.FAILED: TaskState.TASK_STATE_FAILED,
    RunStatus.NEEDS_ATTENTION: TaskState.TASK_STATE_FAILED,
}
FINAL_STATES = frozenset({
    TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_CANCELED, TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_REJECTED,
})


def task_state(answer: Answer, *, asking: bool = False) -> TaskState:
    """The A2A state of the task whose input has this answer; ``asking``: a question of an MCP
    server waits on its run."""
    if answer.input.state is InputState.CANCELLED:
        return TaskState.TASK_STATE_CANCELED
    if answer.run is None:
        return TaskState.TASK_STATE_SUBMITTED
    if answer.run.status is RunStatus.RUNNING and asking:
        return TaskState.TASK_STATE_INPUT_REQUIRED
    return _STATES[answer.run.status]


def state_name(state: TaskState) -> str:
    """``TASK_STATE_INPUT_REQUIRED`` as A2A writes it in prose: ``input-required``."""
    return str(TaskState.Name(state)).removeprefix("TASK_STATE_").lower().replace("_", "-")


def timestamp(at_us: int) -> Timestamp:
    stamp = Timestamp()
    stamp.FromMicroseconds(at_us)
    return stamp


def agent_text(text: str, *, task_id: str, context_id: str, message_id: str,
               meta: Mapping[str, Any] | None = None) -> Message:
    """A message of the agent's, in words."""
    message = Message(message_id=message_id, task_id=task_id, context_id=context_id,
                      role=Role.ROLE_AGENT, parts=[Part(text=text)])
    if meta:
        message.metadata.update({"tidings": dict(meta)})
    return message


def person_words(said: Said) -> bool:
    """Whether a transcript message is a person's own words (never the runtime's)."""
    return said.role == "user" and said.origin is Origin.PERSON


def history_message(said: Said, *, task_id: str, context_id: str,
                    message_ids: Mapping[str, str]) -> Message:
    """One transcript message as an A2A message (see the module docstring)."""
    person = person_words(said)
    message_id = (message_ids.get(said.input_id, said.message_id) if said.input_id
                  else said.message_id)
    message = Message(message_id=message_id, task_id=task_id, context_id=context_id,
                      role=Role.ROLE_USER if person else Role.ROLE_AGENT)
    if said.content or not said.tool_calls:
        message.parts.append(Part(text=said.content))
    if said.tool_calls:
        calls = Part()
        calls.data.struct_value.update({"tool_calls": [dict(call) for call in said.tool_calls]})
        message.parts.append(calls)
    meta: dict[str, Any] = {"role": said.role, "seq": said.seq,
                            "origin": None if said.origin is None else said.origin.value}
    if said.tool_name is not None:
        meta.update(tool_name=said.tool_name, tool_call_id=said.tool_call_id)
    if not person:
        meta["by_runtime"] = said.role == "user"
    message.metadata.update({"tidings": meta})
    return message


def input_message(item: Input, *, context_id: str) -> Message:
    """An input not yet read by any run, as the message it was: a person's words are the
    user's; a later answer (a task's notice, a child's reply) is the runtime's, an agent's."""
    person = item.origin is Origin.PERSON
    return Message(message_id=str(item.meta.get(MESSAGE_ID_META) or item.input_id),
                   task_id=item.input_id, context_id=context_id,
                   role=Role.ROLE_USER if person else Role.ROLE_AGENT,
                   parts=[Part(text=item.content)])


def waiting_message(approvals: Iterable[Approval], questions: Iterable[Question], *,
                    task_id: str, context_id: str) -> Message | None:
    """What the task waits for, said to the caller: the tool calls to approve or deny, the
    questions to answer."""
    return waiting_for(
        [{"approval_id": a.approval_id, "tool": a.tool_name, "arguments": a.arguments}
         for a in approvals],
        [{"question_id": q.question_id, "message": q.message,
          "requested_schema": q.requested_schema} for q in questions],
        task_id=task_id, context_id=context_id)


def waiting_for(held: list[dict[str, Any]], asked: list[dict[str, Any]], *, task_id: str,
                context_id: str) -> Message | None:
    """:func:`waiting_message` from the held calls (``approval_id``, ``tool``, ``arguments``)
    and the questions (``question_id``, ``message``, ``requested_schema``) as dicts."""
    if not held and not asked:
        return None
    lines = [f"Approve or deny the call {a['tool']}({a['arguments']})." for a in held]
    lines += [f"Answer: {q['message']}" for q in asked]
    return agent_text(" ".join(lines), task_id=task_id, context_id=context_id,
                      message_id=f"{task_id}-waiting",
                      meta={"approvals": held, "questions": asked})


def build_task(item: Input, answer: Answer, *, history: list[Said] | None,
               approvals: Sequence[Approval] = (), questions: Sequence[Question] = (),
               history_length: int | None = None) -> Task:
    """The task of ``item`` as its answer stands. ``history``: the run's transcript (None:
    leave the history out); ``history_length``: keep only the last so many messages."""
    context_id = item.conversation_id
    task_id = item.input_id
    state = task_state(answer, asking=bool(questions))
    run = answer.run
    at_us = item.accepted_at_us
    if run is not None:
        at_us = run.ended_at_us or run.started_at_us or run.created_at_us
    status = TaskStatus(state=state, timestamp=timestamp(at_us))
    if state is TaskState.TASK_STATE_INPUT_REQUIRED:
        waiting = waiting_message(approvals, questions, task_id=task_id, context_id=context_id)
        if waiting is not None:
            status.message.CopyFrom(waiting)
    elif state is TaskState.TASK_STATE_FAILED and run is not None:
        status.message.CopyFrom(agent_text(
            f"The run failed ({run.failure_code or run.status.value}).", task_id=task_id,
            context_id=context_id, message_id=f"{task_id}-failed",
            meta={"status": run.status.value, "failure_code": run.failure_code}))
    task = Task(id=task_id, context_id=context_id, status=status)
    task.metadata.update({"tidings": {
        "run_id": None if run is None else run.run_id,
        "run_status": None if run is None else run.status.value,
        "input_state": item.state.value,
    }})
    if answer.reply is not None:
        task.artifacts.append(Artifact(artifact_id=f"{task_id}-{ANSWER_ARTIFACT}",
                                       name=ANSWER_ARTIFACT, parts=[Part(text=answer.reply)]))
    if history is not None:
        ids: dict[str, str] = {item.input_id: str(item.meta.get(MESSAGE_ID_META) or item.input_id)}
        messages = [history_message(s, task_id=task_id, context_id=context_id, message_ids=ids)
                    for s in history]
        if not any(s.input_id == item.input_id for s in history):
            messages.insert(0, input_message(item, context_id=context_id))
        if history_length is not None:
            messages = messages[len(messages) - history_length:] if history_length else []
        task.history.extend(messages)
    return task


async def read_task(runtime: Runtime, item: Input, *, owner: str | None,
                    history: bool = True, history_length: int | None = None,
                    answer: Answer | None = None) -> Task:
    """The task of ``item`` as it stands now (or as ``answer``, just read, has it)."""
    if answer is None:
        answer = await runtime.inputs.answer_of(item)
    approvals: list[Approval] = []
    questions: list[Question] = []
    run = answer.run
    if run is not None and not run.status.ended:
        approvals = [a for a in await runtime.approvals.list(
            item.conversation_id, owner=owner, status="pending") if a.run_id == run.run_id]
        questions = [q for q in await runtime.questions.list(
            item.conversation_id, owner=owner, status="pending") if q.run_id == run.run_id]
    said: list[Said] | None = None
    if history:
        said = [] if run is None else await runtime.runs.transcript(
            item.conversation_id, run.run_id, owner=owner)
    return build_task(item, answer, history=said, approvals=approvals, questions=questions,
                      history_length=history_length)


__all__ = ("ANSWER_ARTIFACT", "FINAL_STATES", "MESSAGE_ID_META", "agent_text", "build_task",
           "read_task", "state_name", "task_state", "timestamp", "waiting_for")
