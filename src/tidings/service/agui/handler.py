"""A ``RunAgentInput`` as calls of the runtime, and the stream it is answered with.

- ``threadId`` is the conversation: one the token's principal owns (another principal's
  answers the same 404 as an unknown one).
- ``resume`` answers the interrupts that ended the previous run: for a held tool call,
  ``status: "resolved"`` with the payload ``{"approved": true}`` or ``{"approved": false}``,
  or ``status: "cancelled"`` (denied); for a question, ``"resolved"`` with the answer's
  content as the payload, or ``"cancelled"``. Every entry is checked before any is applied;
  one already decided the same way is taken as done (a client that resends after a dropped
  connection), and the stream follows the run the answers let go on.
- The user messages at the end of ``messages`` (after the last message of another role) are
  posted, each once: a message id the conversation has had already is not posted again.
  The stream follows the run that reads the last of them.
- Neither: the stream follows the first run to end after its position.

The position a stream starts after is the client's cursor -- ``Last-Event-ID``, or
``forwardedProps.tidings.after`` (a client that cannot set headers) -- or else the
conversation's journal head before the request changed anything.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import anyio
from ag_ui.core import (
    AssistantMessage,
    BaseEvent,
    ResumeEntry,
    RunAgentInput,
    RunStartedEvent,
    UserMessage,
)
from ag_ui.encoder import EventEncoder
from fastapi.exceptions import RequestValidationError

from tidings.conversations.questions import form_validator
from tidings.errors import (
    ApprovalDecidedError,
    InvalidInputError,
    QuestionDecidedError,
    UnknownApprovalError,
    UnknownConversationError,
    UnknownQuestionError,
)
from tidings.feed import Watch
from tidings.runtime.root import Runtime
from tidings.service.agui.stream import RunStream
from tidings.service.sse import Feeds
from tidings.support.policy import MAX_INT64
from tidings.types import FeedEvent, Input

FORWARDED = "tidings"
"""The key of ``forwardedProps`` that holds tidings' own options (``after``)."""
_ENCODER = EventEncoder()


def _invalid(loc: tuple[str | int, ...], message: str) -> RequestValidationError:
    """A 422 naming the field the client sent, as every other route's input errors do."""
    return RequestValidationError([{"loc": ("body", *loc), "msg": message,
                                    "type": "value_error"}])


def cursor(body: RunAgentInput, last_event_id: str | None) -> int | None:
    """Where the client resumes after: ``Last-Event-ID`` or ``forwardedProps.tidings.after``
    (None: neither)."""
    if last_event_id is not None and last_event_id.strip():
        text = last_event_id.strip()
        if not (text.isascii() and text.isdigit() and int(text) <= MAX_INT64):
            raise _invalid(("Last-Event-ID",), "must be an event id (a journal position)")
        return int(text)
    props = body.forwarded_props
    ours = props.get(FORWARDED) if isinstance(props, dict) else None
    if ours is None:
        return None
    after = ours.get("after") if isinstance(ours, dict) else ours
    if after is None:
        return None
    if isinstance(after, bool) or not isinstance(after, int) or not 0 <= after <= MAX_INT64:
        raise _invalid(("forwardedProps", FORWARDED, "after"),
                       "must be an event id (a journal position): a whole number, 0 or more")
    return after


def new_words(body: RunAgentInput) -> list[tuple[int, UserMessage]]:
    """The user messages at the end of the input's messages, with their places."""
    found: list[tuple[int, UserMessage]] = []
    for index in range(len(body.messages) - 1, -1, -1):
        message = body.messages[index]
        if not isinstance(message, UserMessage):
            break
        found.insert(0, (index, message))
    return found


def text_of(index: int, message: UserMessage) -> str:
    """A user message's words: its text, or its text parts one a line (other parts refused)."""
    content = message.content
    if isinstance(content, str):
        text = content
    else:
        lines: list[str] = []
        for part, item in enumerate(content):
            if getattr(item, "type", None) != "text":
                raise _invalid(("messages", index, "content", part, "type"),
                               "this agent takes text parts only")
            lines.append(str(getattr(item, "text", "")))
        text = "\n".join(lines)
    if not text.strip():
        raise _invalid(("messages", index, "content"), "the message has no words")
    return text


def held_text(body: RunAgentInput) -> dict[str, int]:
    """How much of each assistant message the client holds (a stream resumed mid-answer
    sends the rest only)."""
    return {m.id: len(m.content) for m in body.messages
            if isinstance(m, AssistantMessage) and isinstance(m.content, str)}


@dataclass(frozen=True, slots=True)
class _Answer:
    """One resume entry, checked: what it decides, and the run it lets go on."""

    interrupt_id: str
    run_id: str | None
    approval: bool | None  # a held call: approve or deny
    action: str | None  # a question: accept or cancel
    content: dict[str, Any] | None
    done: bool  # decided this way already


def _approved(index: int, entry: ResumeEntry) -> bool:
    if entry.status == "cancelled":
        return False
    payload = entry.payload
    approved = payload.get("approved") if isinstance(payload, dict) else None
    if not isinstance(approved, bool):
        raise _invalid(("resume", index, "payload", "approved"),
                       'a held tool call is answered with {"approved": true} or '
                       '{"approved": false}')
    return approved


def _fits(index: int, schema: dict[str, Any], content: dict[str, Any]) -> None:
    """A question's answer against its form, before anything is decided: 422 at the field."""
    errors = sorted(form_validator(schema).iter_errors(content),
                    key=lambda e: list(e.absolute_path))
    if errors:
        raise _invalid(("resume", index, "payload", *errors[0].absolute_path),
                       f"does not fit the question's form: {errors[0].message}")


async def _checked(runtime: Runtime, owner: str, conversation_id: str,
                   resume: list[ResumeEntry]) -> list[_Answer]:
    """Each resume entry against the conversation's approvals and questions; nothing is
    decided until every entry is known to be decidable."""
    approvals = {a.approval_id: a for a in await runtime.approvals.list(
        conversation_id, owner=owner)}
    questions = {q.question_id: q for q in await runtime.questions.list(
        conversation_id, owner=owner)}
    checked: list[_Answer] = []
    for index, entry in enumerate(resume):
        approval = approvals.get(entry.interrupt_id)
        question = questions.get(entry.interrupt_id)
        if approval is not None:
            approve = _approved(index, entry)
            done = approval.status in (("approved", "applied") if approve else ("denied",))
            if approval.status != "pending" and not done:
                raise ApprovalDecidedError(approval.approval_id, approval.status)
            checked.append(_Answer(entry.interrupt_id, approval.run_id, approve, None, None,
                                   done))
        elif question is not None:
            action = "cancel" if entry.status == "cancelled" else "accept"
            content = entry.payload if isinstance(entry.payload, dict) else None
            if action == "accept" and content is None:
                raise _invalid(("resume", index, "payload"),
                               "a question is answered with an object that fits its schema")
            if action == "accept" and question.status == "pending":
                _fits(index, question.requested_schema, content or {})
            done = question.status == ("accepted" if action == "accept" else "cancelled")
            if question.status != "pending" and not done:
                raise QuestionDecidedError(question.question_id, question.status)
            checked.append(_Answer(entry.interrupt_id, question.run_id, None, action, content,
                                   done))
        else:
            raise UnknownApprovalError(entry.interrupt_id)
    return checked


async def _decide(runtime: Runtime, owner: str, conversation_id: str,
                  answers: list[_Answer]) -> None:
    for answer in answers:
        if answer.done:
            continue
        try:
            if answer.approval is not None:
                await runtime.approvals.decide(conversation_id, answer.interrupt_id,
                                               approve=answer.approval, decided_by=owner,
                                               owner=owner)
            else:
                await runtime.questions.answer(conversation_id, answer.interrupt_id,
                                               action=str(answer.action), content=answer.content,
                                               decided_by=owner, owner=owner)
        except (ApprovalDecidedError, QuestionDecidedError, UnknownApprovalError,
                UnknownQuestionError):
            continue  # decided meanwhile, by someone else: the stream shows what came of it


@dataclass(slots=True)
class Admitted:
    """What a request did, and where its stream starts: ``first``, the events it opens with
    (``RUN_STARTED``, and the run's end when it ended before the request), then the feed
    after ``after`` unless ``ended``."""

    stream: RunStream
    after: int
    first: list[BaseEvent]
    ended: bool


async def _head(runtime: Runtime, owner: str, conversation_id: str) -> int:
    """The conversation's journal head: an id that is no conversation's is unknown too."""
    try:
        return await runtime.catalog.head(conversation_id, owner=owner)
    except InvalidInputError:
        raise UnknownConversationError(conversation_id) from None


async def admit(runtime: Runtime, owner: str, body: RunAgentInput,
                last_event_id: str | None) -> Admitted:
    """Check the input, then apply it (see the module docstring)."""
    conversation_id = body.thread_id
    began_us = runtime.clock.now_us()
    start = cursor(body, last_event_id)
    head = await _head(runtime, owner, conversation_id)  # unknown or foreign: 404 first
    words = [(m.id, text_of(i, m)) for i, m in new_words(body)]
    answers = await _checked(runtime, owner, conversation_id, body.resume or [])
    await _decide(runtime, owner, conversation_id, answers)
    posted: Input | None = None
    for message_id, text in words:
        posted = await runtime.post(conversation_id, text, owner=owner,
                                    meta={"agui_message_id": message_id},
                                    idempotency_key=f"agui-{message_id}")
    run_id = next((a.run_id for a in answers if a.run_id), None)
    stream = RunStream(runtime, owner, conversation_id, thread_id=body.thread_id,
                       agui_run_id=body.run_id, run_id=run_id, sent=held_text(body),
                       input_id=None if run_id or posted is None else posted.input_id)
    first: list[BaseEvent] = [RunStartedEvent(
        thread_id=body.thread_id, run_id=body.run_id,
        metadata={"tidings": {"after": head if start is None else start}})]
    ended = False
    if posted is not None and start is None and posted.run_id is not None:
        # Posted before (the same message id) and read already: what became of its run is
        # not after the head; it is told as it stands (a cursor would replay it instead).
        answer = await runtime.inputs.answer_of(posted)
        if answer.run is not None:
            made, ended = await stream.settled(answer.run)
            first.extend(made)
    if not ended and start is None and not answers:
        # Calls held before this request, which it does not answer, were told before its
        # start: they are told again at once, as this run's end (nothing moves until a
        # person decides them).
        made = await stream.holding(before_us=began_us)
        first.extend(made)
        ended = bool(made)
    return Admitted(stream, head if start is None else start, first, ended)


def encode(event: BaseEvent, seq: int | None = None, at_us: int | None = None) -> bytes:
    """One AG-UI event as Server-Sent Events by the protocol's encoder. With ``seq``: its
    position as the SSE ``id`` and in ``metadata.tidings.seq``; with ``at_us``: the time of
    the feed event it was made from as its ``timestamp`` (milliseconds since the epoch)."""
    update: dict[str, Any] = {}
    if at_us is not None:
        update["timestamp"] = at_us // 1000
    if seq is not None:
        metadata = dict(event.metadata or {})
        metadata["tidings"] = {**metadata.get("tidings", {}), "seq": seq}
        update["metadata"] = metadata
    encoded = _ENCODER.encode(event.model_copy(update=update) if update else event)
    return (encoded if seq is None else f"id: {seq}\n{encoded}").encode()


def _encoded(made: list[BaseEvent], event: FeedEvent) -> Iterator[bytes]:
    for index, one in enumerate(made):
        yield encode(one, event.seq if index == len(made) - 1 else None, event.at_us)


async def _close_on(shutdown: anyio.Event, watch: Watch) -> None:
    await shutdown.wait()
    watch.close()


async def events(runtime: Runtime, feeds: Feeds, admitted: Admitted, *,
                 shutdown: anyio.Event | None = None) -> AsyncIterator[bytes]:
    """The stream's SSE bytes: ``RUN_STARTED``, then the run's events until it ends, waits
    for a person, the client leaves, or the server stops (the client then reconnects with
    its last id). ``shutdown``: the server began to stop (see :func:`tidings.service.sse.feed`)."""
    yield b"".join(encode(e) for e in admitted.first)
    if admitted.ended:
        return
    stream = admitted.stream
    watch = runtime.watch(stream.conversation_id, after_seq=admitted.after, owner=stream.owner)
    feeds.track(watch)
    closer = None if shutdown is None else asyncio.ensure_future(_close_on(shutdown, watch))
    try:
        event: FeedEvent
        async for event in watch:
            # What else is ready goes in the same write: one send for a stream catching up.
            chunks: list[bytes] = []
            for one in (event, *watch.ready_now()):
                made, ends = await stream.made(one)
                chunks.extend(_encoded(made, one))
                if ends:
                    yield b"".join(chunks)
                    return
            if chunks:
                yield b"".join(chunks)
    finally:
        if closer is not None:
            closer.cancel()
        feeds.forget(watch)
        await watch.aclose()


__all__ = ("FORWARDED", "Admitted", "admit", "cursor", "encode", "events")
