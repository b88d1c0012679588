"""Inputs: one entry through a conversation's single door, where it came from, who wrote it
and how it joins a turn."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from tidings.types.ids import ConversationId, InputId, RunId


class Origin(enum.StrEnum):
    """Where an input came from. ``task_result`` and ``child`` are the kernel's own (M1)."""

    PERSON = "person"
    AGENT = "agent"
    TASK_RESULT = "task_result"
    CHILD = "child"

    @property
    def is_kernel(self) -> bool:
        return self in (Origin.TASK_RESULT, Origin.CHILD)


class AuthorKind(enum.StrEnum):
    HUMAN = "human"
    AGENT = "agent"


class DeliveryMode(enum.StrEnum):
    """``queue`` waits for the next turn; ``steer`` joins the running turn at a safe point."""

    QUEUE = "queue"
    STEER = "steer"


class InputState(enum.StrEnum):
    QUEUED = "queued"
    MATERIALIZED = "materialized"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class Author:
    """Who wrote an input: ``authored_by {kind, handle, display_name}``."""

    kind: AuthorKind
    handle: str
    display_name: str


@dataclass(frozen=True, slots=True)
class Input:
    """One entry through the conversation's single door (M1)."""

    input_id: InputId
    conversation_id: ConversationId
    queue_position: int
    origin: Origin
    authored_by: Author
    sender_conversation_id: ConversationId | None
    run_public_id: RunId | None
    task_key: str | None
    delivery_mode: DeliveryMode
    content: str
    meta: dict[str, Any]
    state: InputState
    run_id: RunId | None
    accepted_at_us: int
