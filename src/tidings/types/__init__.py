"""Identifiers, states and the small immutable records that cross layer boundaries.

One module per concept, all of them imported from here: the ids (:mod:`.ids`); the outbox's
operations, signals, deliveries and bounds (:mod:`.outbox`); the inputs through a
conversation's door (:mod:`.inputs`); runs, their usage and the answer to a posted input
(:mod:`.runs`); conversations and their profiles (:mod:`.conversations`); messages, events,
the feed and tool calls (:mod:`.transcript`). Each imports only from those before it in that
list.
"""

from __future__ import annotations

from tidings.types.conversations import (
    Conversation,
    ConversationStatus,
    GoalStatus,
    Profile,
)
from tidings.types.ids import (
    JSON,
    ConversationId,
    DeliveryId,
    EventId,
    InputId,
    InstanceId,
    MessageId,
    OperationId,
    RunId,
    new_id,
)
from tidings.types.inputs import (
    Author,
    AuthorKind,
    DeliveryMode,
    Input,
    InputState,
    Origin,
)
from tidings.types.outbox import (
    DeadLetter,
    Delivery,
    DeliveryState,
    Lease,
    Operation,
    OperationState,
    OutboxConfig,
    Published,
    QueueStats,
    ReconcileReport,
    Signal,
    SweepReport,
)
from tidings.types.runs import (
    Answer,
    Run,
    RunStatus,
    StartKind,
    Usage,
)
from tidings.types.transcript import (
    Event,
    FeedEvent,
    Message,
    ToolCall,
    ToolContext,
)

__all__ = (
    "JSON",
    "Answer",
    "Author",
    "AuthorKind",
    "Conversation",
    "ConversationId",
    "ConversationStatus",
    "DeadLetter",
    "Delivery",
    "DeliveryId",
    "DeliveryMode",
    "DeliveryState",
    "Event",
    "EventId",
    "FeedEvent",
    "GoalStatus",
    "Input",
    "InputId",
    "InputState",
    "InstanceId",
    "Lease",
    "Message",
    "MessageId",
    "Operation",
    "OperationId",
    "OperationState",
    "Origin",
    "OutboxConfig",
    "Profile",
    "Published",
    "QueueStats",
    "ReconcileReport",
    "Run",
    "RunId",
    "RunStatus",
    "Signal",
    "StartKind",
    "SweepReport",
    "ToolCall",
    "ToolContext",
    "Usage",
    "new_id",
)
