"""Identifiers, states and the small immutable records that cross layer boundaries."""

from __future__ import annotations

import enum
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NewType

ConversationId = NewType("ConversationId", str)
EventId = NewType("EventId", str)
OperationId = NewType("OperationId", str)
InstanceId = NewType("InstanceId", str)
DeliveryId = NewType("DeliveryId", int)
RunId = NewType("RunId", str)
InputId = NewType("InputId", str)
MessageId = NewType("MessageId", str)

JSON = Any
"""A value that round-trips through :func:`json.dumps` (objects, arrays, strings, numbers)."""


def new_id(prefix: str) -> str:
    """A unique id that sorts by creation time (like UUIDv7): nanoseconds, then 64 random bits.

    Time order keeps the unique indexes on ids appending at their right edge instead of writing
    all over them, which is most of the cost of an insert on PostgreSQL.
    """
    # os.urandom(8).hex() is what secrets.token_hex(8) returns, without its two calls.
    return f"{prefix}_{time.time_ns():016x}{os.urandom(8).hex()}"


class OperationState(enum.StrEnum):
    """The lifecycle of a runtime operation; every state but ``accepted`` is final."""

    ACCEPTED = "accepted"
    COMPLETED = "completed"
    FAILED = "failed"
    OUTCOME_UNKNOWN = "outcome_unknown"


class DeliveryState(enum.StrEnum):
    """One recipient's consumer state for a signal event."""

    READY = "ready"
    LEASED = "leased"
    ACKNOWLEDGED = "acknowledged"
    DEAD_LETTER = "dead_letter"


@dataclass(frozen=True, slots=True)
class Operation:
    """A runtime-level action with a lifecycle (restart, background tool call, …)."""

    operation_id: OperationId
    kind: str
    owner: str
    origin_instance: InstanceId
    state: OperationState
    accepted_at_us: int
    settled_at_us: int | None
    outcome: JSON | None
    failure_code: str | None


@dataclass(frozen=True, slots=True)
class Signal:
    """A validated, encoded signal, ready to publish (``Outbox.signal``)."""

    conversation_id: ConversationId
    type: str
    payload_text: str
    payload_bytes: int
    event_id: EventId
    idempotency_key: str
    operation_id: OperationId | None
    schema_version: int


@dataclass(frozen=True, slots=True)
class Published:
    """The answer to a publish: the event and its delivery, first-published on a duplicate key."""

    event_id: EventId
    seq: int
    delivery_id: DeliveryId
    conversation_id: ConversationId
    created: bool


@dataclass(frozen=True, slots=True)
class Delivery:
    """A claimed signal: the immutable event plus this recipient's attempt count."""

    delivery_id: DeliveryId
    event_id: EventId
    seq: int
    queue_seq: int
    type: str
    operation_id: OperationId | None
    conversation_id: ConversationId
    payload: JSON
    payload_bytes: int
    schema_version: int
    attempts: int
    published_at_us: int


@dataclass(frozen=True, slots=True)
class Lease:
    """A fenced claim on a batch of deliveries: only this token, before its deadline, may act."""

    token: str
    conversation_id: ConversationId
    deadline_us: int
    deliveries: tuple[Delivery, ...]

    @property
    def delivery_ids(self) -> tuple[DeliveryId, ...]:
        return tuple(d.delivery_id for d in self.deliveries)


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A delivery that will not be retried, with its non-sensitive failure code."""

    delivery_id: DeliveryId
    event_id: EventId
    conversation_id: ConversationId
    type: str
    attempts: int
    failure_code: str
    published_at_us: int
    settled_at_us: int


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Backlog figures for one conversation, or all of them (``conversation_id`` None)."""

    conversation_id: ConversationId | None
    backlog: int
    ready: int
    leased: int
    oldest_age_us: int | None
    retried: int
    max_attempts: int
    dead_letters: int


@dataclass(frozen=True, slots=True)
class ReconcileReport:
    """What a reconciliation of gone instances changed."""

    gone_instances: tuple[InstanceId, ...]
    leases_invalidated: int
    operations_unknown: tuple[OperationId, ...]
    slots_voided: tuple[ConversationId, ...] = ()
    """Conversations whose slot a gone instance held, voided before its deadline."""


@dataclass(frozen=True, slots=True)
class SweepReport:
    """What one sweep changed."""

    reconciled: ReconcileReport
    dead_lettered: int
    purged: int


@dataclass(frozen=True, slots=True)
class OutboxConfig:
    """Bounds and timings of the outbox and of the instance it acts for; every duration
    carries its unit in its type."""

    payload_limit_bytes: int = 8 * 1024
    backlog_limit: int = 1_000
    claim_max_count: int = 16
    claim_max_bytes: int = 64 * 1024
    lease_ttl: timedelta = timedelta(seconds=30)
    max_attempts: int = 5
    backoff_base: timedelta = timedelta(seconds=1)
    backoff_cap: timedelta = timedelta(minutes=5)
    retention: timedelta = timedelta(days=1)
    heartbeat_interval: timedelta = timedelta(seconds=5)
    instance_timeout: timedelta = timedelta(minutes=2)
    sweep_interval: timedelta = timedelta(seconds=5)
    purge_batch: int = 1_000


# -- conversations, inputs, runs, transcript ---------------------------------------------------


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


class RunStatus(enum.StrEnum):
    """A run's status; every status but queued, running and awaiting_approval is final.
    ``awaiting_approval``: a running run holding on a tool call a person has not decided yet;
    once every such call is decided (or expired) it is ``running`` again."""

    QUEUED = "queued"
    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting_approval"
    COMPLETED = "completed"
    FAILED = "failed"
    NEEDS_ATTENTION = "needs_attention"
    STOPPED = "stopped"

    @property
    def ended(self) -> bool:
        """Whether the run is over (a final status)."""
        return self not in (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.AWAITING_APPROVAL)


class StartKind(enum.StrEnum):
    """Why the coordinator was asked to start a turn (C2). Only ``person`` is not automatic."""

    PERSON = "person"
    AGENT = "agent"
    MAIL = "mail"
    WAKE = "wake"
    GOAL = "goal"

    @property
    def automatic(self) -> bool:
        return self in (StartKind.WAKE, StartKind.GOAL)


@dataclass(frozen=True, slots=True)
class Author:
    """Who wrote an input: ``authored_by {kind, handle, display_name}``."""

    kind: AuthorKind
    handle: str
    display_name: str


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
class Usage:
    """What model calls spent, summed: calls made and tokens, as the providers reported them.

    ``input_tokens`` counts every prompt token, cached ones included; ``cache_read_tokens`` and
    ``cache_write_tokens`` are the parts of it the provider read from, or wrote to, its prompt
    cache. A count a provider does not report adds nothing. ``model_calls`` counts every call
    made, answered or failed; a failed call adds the tokens its provider reported before it
    failed, if any.
    """

    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            model_calls=self.model_calls + other.model_calls,
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
        )

    def tokens(self) -> dict[str, int]:
        """The token counts by kind: ``input``, ``output``, ``cache_read``, ``cache_write``."""
        return {
            "input": self.input_tokens,
            "output": self.output_tokens,
            "cache_read": self.cache_read_tokens,
            "cache_write": self.cache_write_tokens,
        }


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


@dataclass(frozen=True, slots=True)
class Run:
    """The durable record of one turn."""

    run_id: RunId
    conversation_id: ConversationId
    trigger: StartKind
    status: RunStatus
    model: str | None
    failure_code: str | None
    steps: int
    created_at_us: int
    started_at_us: int | None
    ended_at_us: int | None
    usage: Usage = Usage()
    """What the run's model calls spent, written with its end (zero while it runs, and for a
    run whose process died before its end)."""
    model_failures: tuple[dict[str, Any], ...] = ()
    """Each model a run that exhausted them asked, and why it failed (``model``, ``reason``...)."""


@dataclass(frozen=True, slots=True)
class Answer:
    """What became of a posted input, when its poster waited for it (``post(..., wait=True)``).

    ``run`` is the run that read the input (the turn it started, or joined as a steer), or --
    while no run has written it yet -- the running turn that took it; None while the input
    waits in the queue, or once it was cancelled unread. ``reply`` is that run's final
    assistant text (None while it has none: running, awaiting approval, failed...).
    ``timed_out`` says the wait ended first (its timeout, or a shutdown): the answer is the
    input and its run as they stood then, and the input stays accepted.
    """

    input: Input
    run: Run | None
    reply: str | None
    timed_out: bool

    @property
    def status(self) -> RunStatus | InputState:
        """The run's status; without a run, the input's state (``queued`` or ``cancelled``)."""
        return self.run.status if self.run is not None else self.input.state


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
