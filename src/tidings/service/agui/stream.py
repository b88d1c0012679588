"""One AG-UI run's events, made from the conversation's feed.

A stream follows the conversation's feed from a position and ends at the first of: the end of
the run it waits for (``RUN_FINISHED``, cancelled for a stopped run, or ``RUN_ERROR`` for a
failed one), a held tool call or a question a person must answer (``RUN_FINISHED`` with the
``interrupt`` outcome), or the input it waits for withdrawn unread (cancelled). The run it
waits for is the one that reads the input the request posted, the one whose interrupts the
request answered, or -- a request that brings neither -- the first run to end after the
position it starts from.

What each feed event makes (every event of the conversation is shown, whichever run wrote it):

- ``message_delta`` (live): ``TEXT_MESSAGE_START`` once, then ``TEXT_MESSAGE_CONTENT`` with
  the text that is new to the client. The message's id is the run's and the step's
  (``RUN-STEP``), so the pieces and the committed answer are one message.
- ``message_discarded`` (live): the message ends (``TEXT_MESSAGE_END``) and a ``CUSTOM`` event
  ``tidings.discarded`` says the text will not be kept; a new try of the step is a new message.
- ``message_committed``: an assistant message ends its text (the rest of it, or all of it when
  no piece was streamed) and carries its tool calls (``TOOL_CALL_START`` / ``ARGS`` /
  ``END``); a tool's message is ``TOOL_CALL_RESULT``; the runtime's own words (a background
  task's notice, a child's reply, another agent's input) are a ``CUSTOM`` event
  ``tidings.notice``, never a user message; a person's own words are not repeated.

Each event made from a journal event carries its position: the last AG-UI event made from it
has ``metadata.tidings.seq`` and the SSE ``id`` (:mod:`~tidings.service.agui.handler`), so a
client that reconnects after it misses nothing and gets nothing twice.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    EventType,
    Interrupt,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from tidings.conversations.approvals import Approval
from tidings.runtime.root import Runtime
from tidings.types import FeedEvent, Run, RunStatus

NOTICE = "tidings.notice"
"""The ``CUSTOM`` event's name for the runtime's own words."""
DISCARDED = "tidings.discarded"
"""The ``CUSTOM`` event's name for streamed text that will not be kept."""
APPROVAL = "tool_approval"
QUESTION = "question"
APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}
"""What a resume entry's payload for a held tool call holds."""


def message_id(run_id: str, step: object, attempt: int = 0) -> str:
    """The AG-UI id of the text a run's step writes (its ``attempt``-th try after a discard)."""
    return f"{run_id}-{step}" if not attempt else f"{run_id}-{step}.{attempt}"


def _iso(at_us: int) -> str:
    return datetime.fromtimestamp(at_us / 1_000_000, UTC).isoformat()


class RunStream:
    """The AG-UI events of one request's run (see the module docstring).

    ``input_id``: the input the request posted (its run is found in the feed); ``run_id``: the
    tidings run already known; neither: the first run to end. ``sent``: how much of each text
    message the client holds already (the assistant messages of its input), so that a stream
    resumed mid-answer sends only the rest.
    """

    def __init__(self, runtime: Runtime, owner: str, conversation_id: str, *, thread_id: str,
                 agui_run_id: str, input_id: str | None = None, run_id: str | None = None,
                 sent: Mapping[str, int] | None = None) -> None:
        self.runtime, self.owner = runtime, owner
        self.conversation_id = conversation_id
        self.thread_id, self.agui_run_id = thread_id, agui_run_id
        self.input_id, self.run_id = input_id, run_id
        self.follow = input_id is None and run_id is None
        self.sent: dict[str, int] = dict(sent or {})
        self.open: str | None = None
        self.attempts: dict[tuple[str, str], int] = {}

    # -- one feed event ----------------------------------------------------------------------

    async def made(self, event: FeedEvent) -> tuple[list[BaseEvent], bool]:
        """The AG-UI events ``event`` makes, and whether it ends the stream."""
        data = event.data
        run = str(event.run_id or data.get("run_id") or data.get("run_public_id") or "")
        if event.type == "message_delta":
            return self._delta(run, data), False
        made = await self._other(event, run)
        ends = bool(made) and made[-1].type in (EventType.RUN_FINISHED, EventType.RUN_ERROR)
        if made and not isinstance(made[0], TextMessageStartEvent | TextMessageContentEvent):
            made = [*self._close(), *made]  # any other event closes the text in progress
        return made, ends

    async def _other(self, event: FeedEvent, run: str) -> list[BaseEvent]:
        data = event.data
        if event.type == "message_discarded":
            return self._discarded(run, data)
        if event.type == "message_committed":
            return self._committed(data)
        if event.type == "input_cancelled" and self.input_id in (data.get("input_ids") or ()):
            return [self._finished(RunFinishedCancelledOutcome())]
        if self.run_id is None and self.input_id is not None:
            if event.type == "input_materialized" and data.get("input_id") == self.input_id:
                self.run_id = str(data.get("run_public_id"))
            elif event.type == "turn_status" and self.input_id in (data.get("inputs") or ()):
                self.run_id = run
        ours = run == self.run_id or (self.follow and bool(run))
        if event.type == "turn_status" and ours:
            return await self._turn_status(run, data)
        if event.type == "question_asked" and ours:
            return await self._question(run, data)
        return []

    # -- text --------------------------------------------------------------------------------

    def _id(self, run: str, step: object) -> str:
        return message_id(run, step, self.attempts.get((run, str(step)), 0))

    def _start(self, mid: str) -> list[BaseEvent]:
        if self.open == mid:
            return []
        made = self._close()
        self.open = mid
        made.append(TextMessageStartEvent(message_id=mid, role="assistant"))
        return made

    def _close(self) -> list[BaseEvent]:
        if self.open is None:
            return []
        mid, self.open = self.open, None
        return [TextMessageEndEvent(message_id=mid)]

    def _delta(self, run: str, data: Mapping[str, Any]) -> list[BaseEvent]:
        mid = self._id(run, data.get("step"))
        text = str(data.get("text") or "")
        offset = int(data.get("offset") or 0)
        held = self.sent.get(mid, 0)
        new = text[max(0, held - offset):]
        if not new:
            return []
        self.sent[mid] = max(held, offset + len(text))
        return [*self._start(mid), TextMessageContentEvent(message_id=mid, delta=new)]

    def _discarded(self, run: str, data: Mapping[str, Any]) -> list[BaseEvent]:
        step = str(data.get("step"))
        mid = self._id(run, step)
        self.attempts[(run, step)] = self.attempts.get((run, step), 0) + 1
        if mid not in self.sent:
            return []
        del self.sent[mid]
        return [CustomEvent(name=DISCARDED, value={
            "messageId": mid, "reason": data.get("reason")})]

    def _committed(self, data: Mapping[str, Any]) -> list[BaseEvent]:
        message = data.get("message")
        if not isinstance(message, dict):
            return []
        role = message.get("role")
        content = str(message.get("content") or "")
        if role == "user":
            if not data.get("by_runtime"):
                return []  # a person's own words: the client sent them
            return [CustomEvent(name=NOTICE, value={
                "text": content, "origin": message.get("origin"),
                "messageId": message.get("message_id")})]
        if role == "tool":
            return [ToolCallResultEvent(
                message_id=str(message.get("message_id")),
                tool_call_id=str(message.get("tool_call_id")), content=content, role="tool")]
        if role != "assistant":
            return []
        mid = self._id(str(message.get("run_id")), message.get("step"))
        made: list[BaseEvent] = []
        rest = content[self.sent.get(mid, 0):]
        if rest:
            self.sent[mid] = len(content)
            made.extend([*self._start(mid), TextMessageContentEvent(message_id=mid, delta=rest)])
        elif mid in self.sent and content:
            made.extend(self._start(mid))  # all of it was streamed: it still ends here
        made.extend(self._close())
        for call in message.get("tool_calls") or ():
            call_id = str(call.get("call_id"))
            made.extend([
                ToolCallStartEvent(tool_call_id=call_id, tool_call_name=str(call.get("name")),
                                   parent_message_id=mid),
                ToolCallArgsEvent(tool_call_id=call_id, delta=json.dumps(
                    call.get("arguments") or {}, ensure_ascii=False)),
                ToolCallEndEvent(tool_call_id=call_id),
            ])
        return made

    async def settled(self, run: Run) -> tuple[list[BaseEvent], bool]:
        """The run's end as it stands now, for a request that comes after it (nothing while
        it runs: the feed tells the rest)."""
        if run.status is RunStatus.AWAITING_APPROVAL:
            held = [a.approval_id for a in await self.runtime.approvals.list(
                self.conversation_id, owner=self.owner, status="pending")
                if a.run_id == run.run_id]
            made = await self._held(run.run_id, held)
        elif run.status.ended:
            made = await self._turn_status(run.run_id, {
                "status": run.status.value, "failure_code": run.failure_code})
        else:
            made = []
        self.run_id = run.run_id
        return made, bool(made)

    async def holding(self, *, before_us: int) -> list[BaseEvent]:
        """What waits for a person since before ``before_us`` -- held calls, then questions --
        as interrupts (none: nothing)."""
        held = [a for a in await self.runtime.approvals.list(
            self.conversation_id, owner=self.owner, status="pending")
            if a.requested_at_us < before_us][::-1]
        asked = [q for q in await self.runtime.questions.list(
            self.conversation_id, owner=self.owner, status="pending")
            if q.requested_at_us < before_us][::-1]
        interrupts = [*map(_approval, held), *(
            _asking(q.question_id, q.message, q.requested_schema) for q in asked)]
        if not interrupts:
            return []
        self.run_id = held[0].run_id if held else asked[0].run_id
        return [self._interrupted(interrupts, held)]

    # -- the run's end -----------------------------------------------------------------------

    def _finished(self, outcome: Any = None, **tidings: Any) -> RunFinishedEvent:
        return RunFinishedEvent(thread_id=self.thread_id, run_id=self.agui_run_id,
                                outcome=outcome, metadata={"tidings": tidings} if tidings else None)

    async def _turn_status(self, run: str, data: Mapping[str, Any]) -> list[BaseEvent]:
        status = str(data.get("status"))
        if status == RunStatus.AWAITING_APPROVAL.value:
            return await self._held(run, [str(i) for i in data.get("approvals") or ()])
        if status not in {s.value for s in RunStatus} or not RunStatus(status).ended:
            return []
        self.run_id = run
        if status == RunStatus.COMPLETED.value:
            return [self._finished(run_id=run, status=status)]
        if status == RunStatus.STOPPED.value:
            return [self._finished(RunFinishedCancelledOutcome(), run_id=run, status=status)]
        code = str(data.get("failure_code") or status)
        return [RunErrorEvent(message=f"the run ended {status}: {code}", code=code,
                              metadata={"tidings": {"run_id": run, "status": status}})]

    def _interrupted(self, interrupts: list[Interrupt], held: list[Approval]) -> BaseEvent:
        return self._finished(RunFinishedInterruptOutcome(interrupts=interrupts),
                              run_id=self.run_id, status=RunStatus.AWAITING_APPROVAL.value
                              if held else RunStatus.RUNNING.value)

    async def _held(self, run: str, ids: list[str]) -> list[BaseEvent]:
        """The held calls still waiting for a decision, as interrupts (none: a replay of a
        wait that is over, and the stream goes on to what followed it)."""
        pending = {a.approval_id: a for a in await self.runtime.approvals.list(
            self.conversation_id, owner=self.owner, status="pending")}
        held = [pending[i] for i in ids if i in pending]
        if not held:
            return []
        self.run_id = run
        return [self._interrupted([_approval(a) for a in held], held)]

    async def _question(self, run: str, data: Mapping[str, Any]) -> list[BaseEvent]:
        question_id = str(data.get("question_id"))
        pending = {q.question_id for q in await self.runtime.questions.list(
            self.conversation_id, owner=self.owner, status="pending")}
        if question_id not in pending:
            return []
        schema = data.get("requested_schema")
        self.run_id = run or self.run_id
        return [self._interrupted([_asking(
            question_id, str(data.get("message") or ""),
            schema if isinstance(schema, dict) else None)], [])]


def _approval(a: Approval) -> Interrupt:
    """A held tool call as an interrupt."""
    return Interrupt(
        id=a.approval_id, reason=APPROVAL, message=f"Allow the call of {a.tool_name}?",
        tool_call_id=a.call_id, response_schema=APPROVAL_SCHEMA,
        expires_at=_iso(a.expires_at_us),
        metadata={"tidings": {"tool": a.tool_name, "arguments": a.arguments}})


def _asking(question_id: str, message: str, schema: dict[str, Any] | None) -> Interrupt:
    """A question to a person as an interrupt, its form as the answer's schema."""
    return Interrupt(id=question_id, reason=QUESTION, message=message,
                     response_schema=schema)


__all__ = ("APPROVAL", "APPROVAL_SCHEMA", "DISCARDED", "NOTICE", "QUESTION", "RunStream",
           "message_id")
