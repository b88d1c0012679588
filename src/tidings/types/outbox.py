"""The outbox's records: operations, signals and their deliveries, leases, dead letters, the
backlog's figures, what a sweep changed, and the outbox's bounds."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import timedelta

from tidings.types.ids import (
    JSON,
    ConversationId,
    DeliveryId,
    EventId,
    InstanceId,
    OperationId,
)


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
