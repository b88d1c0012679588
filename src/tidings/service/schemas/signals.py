"""The HTTP bodies of signals: a delivery queue's figures and its dead letters (re-exported by
:mod:`tidings.service.schemas`)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from tidings.types import DeadLetter, QueueStats


class QueueStatsOut(BaseModel):
    conversation_id: str | None = Field(description="null for the totals of all conversations.")
    backlog: int
    ready: int
    leased: int
    oldest_age_us: int | None
    retried: int
    max_attempts: int
    dead_letters: int

    @classmethod
    def of(cls, s: QueueStats) -> QueueStatsOut:
        return cls(conversation_id=s.conversation_id, backlog=s.backlog, ready=s.ready,
                   leased=s.leased, oldest_age_us=s.oldest_age_us, retried=s.retried,
                   max_attempts=s.max_attempts, dead_letters=s.dead_letters)


class DeadLetterOut(BaseModel):
    delivery_id: int
    event_id: str
    conversation_id: str
    type: str
    attempts: int
    failure_code: str
    published_at_us: int
    settled_at_us: int

    @classmethod
    def of(cls, d: DeadLetter) -> DeadLetterOut:
        return cls(delivery_id=d.delivery_id, event_id=d.event_id,
                   conversation_id=d.conversation_id, type=d.type, attempts=d.attempts,
                   failure_code=d.failure_code, published_at_us=d.published_at_us,
                   settled_at_us=d.settled_at_us)


class DeadLetterList(BaseModel):
    items: list[DeadLetterOut]

