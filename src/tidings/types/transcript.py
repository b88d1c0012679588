"""The transcript: committed messages, the journal's events and the feed's, and the tool calls
a model asks for."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tidings.types.ids import ConversationId, InputId, MessageId, RunId
from tidings.types.inputs import Origin


@dataclass(frozen=True, slots=True)
class Message:
    """One committed transcript message."""

    conversation_id: ConversationId
    seq: int
    message_id: MessageId
    run_id: RunId | None
    role: str
    content: str
    tool_calls: tuple[dict[str, Any], ...]
    tool_call_id: str | None
    tool_name: str | None
    origin: Origin | None
    input_id: InputId | None
    meta: dict[str, Any]
    created_at_us: int


@dataclass(frozen=True, slots=True)
class Event:
    """One journal row of a conversation; ``seq`` is gap-free and commit ordered."""

    conversation_id: ConversationId
    seq: int
    type: str
    run_id: RunId | None
    data: dict[str, Any]
    at_us: int


@dataclass(frozen=True, slots=True)
class FeedEvent:
    """One event of a conversation's feed (:meth:`tidings.Runtime.watch`).

    A journal event (``seq`` set: committed, durable, gap-free) or a live one (``seq`` None:
    ``message_delta`` or ``message_discarded``, never written to the database, a hint for a
    live view). ``message_committed`` events carry the message itself in ``data``.
    """

    conversation_id: ConversationId
    seq: int | None
    type: str
    run_id: RunId | None
    data: dict[str, Any]
    at_us: int

    @classmethod
    def of(cls, event: Event) -> FeedEvent:
        return cls(event.conversation_id, event.seq, event.type, event.run_id, event.data,
                   event.at_us)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call the model asked for; ``call_id`` pairs it with its result.

    Shared by the model protocol (which returns it) and the transcript (which keeps it), so it
    lives here, below both."""

    call_id: str
    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ToolContext:
    """Who is calling a tool: the conversation, the run, and the call id the model gave.

    Shared by the tool registry and the background tasks a tool starts, so it lives here."""

    conversation_id: ConversationId
    run_id: RunId
    call_id: str
