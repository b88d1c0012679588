"""A conversation's journal as a reader sees it: its events, each filled in from where its
text is written once (the transcript, the inputs).

:func:`read_events` is the one place a page of events is read and filled in: the
conversations' own reads and the feed's channel (:mod:`tidings.feed.channel`) both call it.
:func:`written_events` fills in what this process's own units wrote the same way, for the
channel to hand out without reading it back.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from tidings.records.rows import event_from_row, message_from_row
from tidings.records.transcript import INPUT_ACCEPTED, MESSAGE_COMMITTED, JournalWrite
from tidings.store import Tx
from tidings.types import Event, Message, Origin


def read_events(tx: Tx, conversation_id: str, *, after_seq: int, limit: int) -> list[Event]:
    """A page of the journal after ``after_seq``, each ``message_committed`` event filled in
    with its message from the transcript and each ``input_accepted`` with the input's text and
    whether it is the runtime's own words (one more query for each kind the page holds).

    The journal row keeps only the message's position or the input's id; its text is written
    once, in the transcript or the inputs.
    """
    events = [event_from_row(r) for r in tx.all(
        "events_after", conversation_id=conversation_id, after_seq=after_seq, limit=limit,
    )]
    seqs = [int(e.data["message_seq"]) for e in events
            if e.type == MESSAGE_COMMITTED and "message_seq" in e.data]
    input_ids = [str(e.data["input_id"]) for e in events
                 if e.type == INPUT_ACCEPTED and "input_id" in e.data]
    messages = {
        m.seq: m for m in map(message_from_row, tx.all(
            "messages_by_seq", conversation_id=conversation_id, seqs=seqs,
        ))
    } if seqs else {}
    contents = {
        str(r["input_id"]): str(r["content"]) for r in tx.all(
            "inputs_content_by_id", conversation_id=conversation_id, input_ids=input_ids,
        )
    } if input_ids else {}
    return _filled(events, messages, contents)


def written_events(writes: Iterable[object]) -> list[Event]:
    """The events that units of this process wrote (:class:`JournalWrite`, in commit order),
    exactly as :func:`read_events` would read them back once committed: the same rows, filled
    in from the same messages and texts, without a query."""
    events: list[Event] = []
    messages: dict[int, Message] = {}
    contents: dict[str, str] = {}
    for write in writes:
        assert isinstance(write, JournalWrite)
        events += [event_from_row({
            "conversation_id": write.conversation_id, "seq": e["seq"], "type": e["type"],
            "run_id": e["run_id"], "data": e["data"], "at_us": write.at_us,
        }) for e in write.events]
        messages.update(write.messages)
        contents.update(write.inputs)
    return _filled(events, messages, contents)


def _filled(events: list[Event], messages: dict[int, Message],
            contents: dict[str, str]) -> list[Event]:
    if not messages and not contents:
        return events

    def filled(e: Event) -> Event:
        if e.type == MESSAGE_COMMITTED:
            message = messages.get(int(e.data.get("message_seq", 0)))
            return e if message is None else replace(e, data=committed_data(message))
        if e.type == INPUT_ACCEPTED and (text := contents.get(str(e.data.get("input_id")))):
            return replace(e, data={**e.data, "content": text,
                                    "by_runtime": e.data.get("origin") != Origin.PERSON.value})
        return e

    return [filled(e) for e in events]


def committed_data(message: Message) -> dict[str, Any]:
    """What a ``message_committed`` event says: the message, and whether these are the
    runtime's own words (a task's notice, a child's mail, any other input not a person's
    words) rather than a person's."""
    return {
        "message": {
            "seq": message.seq,
            "message_id": message.message_id,
            "role": message.role,
            "content": message.content,
            "tool_calls": [
                {"call_id": c["call_id"], "name": c["name"], "arguments": c["arguments"]}
                for c in message.tool_calls
            ],
            "tool_call_id": message.tool_call_id,
            "tool_name": message.tool_name,
            "origin": None if message.origin is None else message.origin.value,
            "input_id": message.input_id,
            "run_id": message.run_id,
            "step": message.meta.get("step") if message.role == "assistant" else None,
        },
        "by_runtime": message.role == "user" and message.origin is not Origin.PERSON,
    }


__all__ = ("committed_data", "read_events", "written_events")
