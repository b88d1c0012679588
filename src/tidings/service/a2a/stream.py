"""A task's stream: the journal events of the run that reads the task, as A2A events.

A stream carries the task first (placed at the position the stream starts from), then the
task's events from the conversation's feed (:func:`task_events`: one stream event per journal
event, each with its position), until a final state or ``input-required``. ``SubscribeToTask``
with a ``Last-Event-ID`` header (:func:`last_event_id`) resumes after that position, in any
process and after a restart; a task that ended is replayed from the journal, not waited on.

One journal event makes at most one stream event, and which one depends on the event alone
(for the run's end, on the ended run too, which no longer changes). So a position in the
conversation's journal is a position in the task's stream, the same after a restart and in
every process of a cluster: each stream event made from a journal event carries its seq
(``metadata.tidings.seq``, and the SSE ``id`` -- :mod:`~tidings.service.a2a.cursor`), and a
stream resumed after a seq replays the task's events after it, each once.

- ``message_delta`` (live, not in the journal, no seq): an appended chunk of the ``answer``
  artifact, its place in the step's text in ``metadata.tidings`` (``step``, ``offset``). A
  stream that joins an answer in progress -- a reconnected one too -- gets it from its start
  (offset 0); the whole answer follows at its commit anyway.
- ``message_committed`` of the run: the answer (an assistant message without tool calls) as
  the whole ``answer`` artifact (``lastChunk``); a tool call, a tool's result or a runtime
  notice as a ``working`` status with that message. A person's own words are not repeated.
- ``turn_status``: ``running`` is ``working``; ``awaiting_approval`` is ``input-required``
  naming the held calls; a final status is the task's final state. Both end the stream.
- ``question_asked`` on the run: ``input-required`` with the question; ends the stream.
- ``input_cancelled`` naming the task (withdrawn before a run read it): ``canceled``; ends it.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.types.a2a_pb2 import (
    Artifact,
    Message,
    Part,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import InvalidParamsError

from tidings.feed import Watch
from tidings.service.a2a.stores import Caller
from tidings.service.a2a.tasks import (
    ANSWER_ARTIFACT,
    FINAL_STATES,
    history_message,
    person_words,
    read_task,
    timestamp,
    waiting_for,
)
from tidings.types import FeedEvent, Input, MessageId, Origin, RunId, RunStatus
from tidings.types import Message as Said

SEQ = "seq"
"""The key of ``metadata.tidings`` that holds a stream event's journal position."""


def at(seq: int) -> dict[str, Any]:
    """The metadata that places a stream event at journal position ``seq``."""
    return {"tidings": {SEQ: seq}}


class TaskStream:
    """The stream events of one task (see the module docstring).

    ``resumed``: the client has every event up to where this stream starts (a ``Last-Event-ID``);
    a fresh stream began with the task as it stood, so its end also brings the answer, in
    case the answer was committed before the stream's start and after that reading.
    """

    def __init__(self, caller: Caller, item: Input, run_id: str | None, *,
                 resumed: bool) -> None:
        self.caller = caller
        self.item = item
        self.run_id = run_id
        self.resumed = resumed
        self.answered = False
        self.task_id, self.context_id = item.input_id, item.conversation_id
        self.artifact_id = f"{item.input_id}-{ANSWER_ARTIFACT}"

    async def events(self, feed: AsyncIterator[FeedEvent]) -> AsyncGenerator[Event]:
        """The stream events of ``feed``'s events, until one ends the task's stream."""
        async for event in feed:
            made, ends = await self._made(event)
            for one in made:
                yield one
            if ends:
                return

    # -- one journal event -------------------------------------------------------------------

    async def _made(self, event: FeedEvent) -> tuple[list[Event], bool]:
        data = event.data
        if event.type == "input_cancelled" and self.task_id in (data.get("input_ids") or ()):
            return [self._status(TaskState.TASK_STATE_CANCELED, event)], True
        if self.run_id is None:  # the task's input waits: the run that reads it is found here
            if event.type == "input_materialized" and data.get("input_id") == self.task_id:
                self.run_id = str(data.get("run_public_id"))
            elif event.type == "turn_status" and self.task_id in (data.get("inputs") or ()):
                self.run_id = event.run_id or str(data.get("run_public_id"))
            else:
                return [], False
        if (event.run_id or data.get("run_id") or data.get("run_public_id")) != self.run_id:
            return [], False
        if event.type == "message_delta":
            return [self._chunk(data)], False
        if event.type == "message_committed":
            return self._committed(event), False
        if event.type == "turn_status":
            return await self._turn_status(event)
        if event.type == "question_asked":
            waiting = waiting_for([], [{
                "question_id": data.get("question_id"), "message": data.get("message"),
                "requested_schema": data.get("requested_schema")}],
                task_id=self.task_id, context_id=self.context_id)
            return [self._status(TaskState.TASK_STATE_INPUT_REQUIRED, event, waiting)], True
        return [], False

    def _status(self, state: TaskState, event: FeedEvent, message: Message | None = None
                ) -> TaskStatusUpdateEvent:
        update = TaskStatusUpdateEvent(
            task_id=self.task_id, context_id=self.context_id,
            status=TaskStatus(state=state, timestamp=timestamp(event.at_us)))
        if message is not None:
            update.status.message.CopyFrom(message)
        if event.seq is not None:
            update.metadata.update(at(event.seq))
        return update

    def _chunk(self, data: dict[str, Any]) -> TaskArtifactUpdateEvent:
        offset = data.get("offset")
        chunk = TaskArtifactUpdateEvent(
            task_id=self.task_id, context_id=self.context_id, append=True,
            last_chunk=False, artifact=Artifact(artifact_id=self.artifact_id,
                                                name=ANSWER_ARTIFACT,
                                                parts=[Part(text=str(data.get("text", "")))]))
        chunk.metadata.update({"tidings": {"step": data.get("step"), "offset": offset}})
        return chunk

    def _committed(self, event: FeedEvent) -> list[Event]:
        said = _said(event)
        if said is None or person_words(said):
            return []
        if said.role == "assistant" and not said.tool_calls:
            self.answered = True
            return [self._answer(said.content, event.seq)]
        return [self._status(TaskState.TASK_STATE_WORKING, event, history_message(
            said, task_id=self.task_id, context_id=self.context_id, message_ids={}))]

    def _answer(self, text: str, seq: int | None) -> TaskArtifactUpdateEvent:
        whole = TaskArtifactUpdateEvent(
            task_id=self.task_id, context_id=self.context_id, append=False, last_chunk=True,
            artifact=Artifact(artifact_id=self.artifact_id, name=ANSWER_ARTIFACT,
                              parts=[Part(text=text)]))
        if seq is not None:
            whole.metadata.update(at(seq))
        return whole

    async def _turn_status(self, event: FeedEvent) -> tuple[list[Event], bool]:
        runtime, owner = self.caller.runtime, self.caller.principal
        status = str(event.data.get("status"))
        if status == RunStatus.RUNNING.value:
            return [self._status(TaskState.TASK_STATE_WORKING, event)], False
        if status == RunStatus.AWAITING_APPROVAL.value:
            ids = [str(i) for i in event.data.get("approvals") or ()]
            found = {a.approval_id: a for a in await runtime.approvals.list(
                self.context_id, owner=owner) if a.approval_id in ids}
            held = [{"approval_id": i, "tool": found[i].tool_name,
                     "arguments": found[i].arguments} for i in ids if i in found]
            waiting = waiting_for(held, [], task_id=self.task_id, context_id=self.context_id)
            return [self._status(TaskState.TASK_STATE_INPUT_REQUIRED, event, waiting)], True
        if status not in {s.value for s in RunStatus} or not RunStatus(status).ended:
            return [], False
        # The run ended: the task as it stands now is the task at this event, and stays so.
        ended = await read_task(runtime, self.item, owner=owner, history=False)
        made: list[Event] = []
        if not self.answered and not self.resumed:
            made.extend(self._answer(str(a.parts[0].text), None) for a in ended.artifacts
                        if a.name == ANSWER_ARTIFACT and a.parts)
        final = self._status(ended.status.state, event)
        final.status.CopyFrom(ended.status)
        made.append(final)
        return made, True


def _said(event: FeedEvent) -> Said | None:
    """The transcript message a ``message_committed`` event carries."""
    message = event.data.get("message")
    if not isinstance(message, dict):
        return None
    origin = message.get("origin")
    run_id = message.get("run_id")
    return Said(
        conversation_id=event.conversation_id, seq=int(message.get("seq") or 0),
        message_id=MessageId(str(message.get("message_id"))),
        run_id=None if run_id is None else RunId(str(run_id)),
        role=str(message.get("role")), content=str(message.get("content") or ""),
        tool_calls=tuple(message.get("tool_calls") or ()),
        tool_call_id=message.get("tool_call_id"), tool_name=message.get("tool_name"),
        origin=None if origin is None else Origin(origin),
        input_id=message.get("input_id"), meta={}, created_at_us=event.at_us,
    )


async def task_events(caller: Caller, item: Input, *, after_seq: int, resumed: bool
                      ) -> AsyncGenerator[Event]:
    """The task as it stands (placed at ``after_seq``), then its events after ``after_seq``
    (:class:`TaskStream`) until it ends or waits for a person. A task that ended already has
    all its events in the journal: they are read up to its end, never waited for."""
    runtime, owner = caller.runtime, caller.principal
    task = await read_task(runtime, item, owner=owner)
    task.metadata.get_or_create_struct("tidings")[SEQ] = after_seq
    yield task
    run = (await runtime.inputs.answer_of(item)).run
    stream = TaskStream(caller, item, None if run is None else str(run.run_id),
                        resumed=resumed)
    feed: Watch | AsyncGenerator[FeedEvent] = (
        _journal(caller, item.conversation_id, after_seq)
        if task.status.state in FINAL_STATES
        else runtime.watch(item.conversation_id, after_seq=after_seq, owner=owner))
    try:
        async with aclosing(stream.events(feed)) as events:
            async for event in events:
                yield event
    finally:
        await feed.aclose()


def last_event_id(context: ServerCallContext) -> int | None:
    """The position a client resumes after: its ``Last-Event-ID`` header (None: none)."""
    headers = context.state.get("headers") or {}
    last = str(headers.get("last-event-id", "")).strip()
    if not last:
        return None
    if not last.isdigit() or len(last) > 18:
        raise InvalidParamsError("Last-Event-ID must be a stream event's id (a position)")
    return int(last)


async def _journal(caller: Caller, conversation_id: str, after_seq: int
                   ) -> AsyncGenerator[FeedEvent]:
    """The conversation's journal after ``after_seq`` as it stands, page by page."""
    while True:
        page = await caller.runtime.events(conversation_id, after_seq=after_seq,
                                           owner=caller.principal)
        for event in page:
            yield FeedEvent.of(event)
        if not page:
            return
        after_seq = page[-1].seq


__all__ = ("SEQ", "TaskStream", "at", "last_event_id", "task_events")
