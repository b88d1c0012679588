"""Conversations: a conversation's durable state, its status and goal, and the profile of the
agent that answers in it."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tidings.types.ids import ConversationId
from tidings.types.runs import Usage


class ConversationStatus(enum.StrEnum):
    """Active conversations take everyone's input; archived ones only the kernel's mail."""

    ACTIVE = "active"
    ARCHIVED = "archived"
    TOMBSTONED = "tombstoned"


class GoalStatus(enum.StrEnum):
    """A conversation's long-running objective; only an active goal's checkpoints start turns."""

    NONE = "none"
    ACTIVE = "active"
    PAUSED = "paused"
    BLOCKED = "blocked"
    DONE = "done"


@dataclass(frozen=True, slots=True)
class Profile:
    """The answering agent: model intent and ordered fallbacks, tools, approval mode."""

    model: str
    fallbacks: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    approval_mode: str = "never"  # never | writes (what is not read-only waits) | always (L5)
    system: str = "You are a helpful agent."
    automatic_tools: str = "read_only"
    """read_only: automatic turns (wake-ups, goal checkpoints) get only read-only tools (L4);
    all: they get the profile's tools."""
    background: tuple[str, ...] = ()
    """Tools called as background tasks where they can be (an MCP server's, when it runs tasks)."""

    @property
    def models(self) -> tuple[str, ...]:
        return (self.model, *self.fallbacks)


@dataclass(frozen=True, slots=True)
class Conversation:
    """A conversation's durable state (its transcript and inputs are read separately)."""

    conversation_id: ConversationId
    owner: str
    title: str
    profile: Profile
    status: ConversationStatus
    goal_status: GoalStatus
    goal_text: str | None
    suppressed: bool
    awaiting_person: bool
    created_at_us: int
    usage: Usage | None = None
    """The sums of its runs' usage, on a read that sums them (a conversation's own read); None
    where it was not summed (lists, the conversation as a unit of work holds it)."""
