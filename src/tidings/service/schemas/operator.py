"""The HTTP bodies of the operator's views and acts: one dead letter, what a retry or a discard
did, the instances (re-exported by :mod:`tidings.service.schemas`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from tidings.push import PushDeadLetter
from tidings.records.dead_letters import DeadLetterDetail, Settled
from tidings.records.instances import InstanceRecord


class DeadLetterDetailOut(BaseModel):
    """A dead letter, with what its signal carried."""

    delivery_id: int
    event_id: str
    conversation_id: str
    type: str
    attempts: int
    failure_code: str
    published_at_us: int
    settled_at_us: int
    payload: Any = Field(description="The signal's payload: bounded metadata, as published.")
    payload_bytes: int
    schema_version: int
    operation_id: str | None
    last_lease_owner: str | None = Field(description="The run that held it last, if one did.")

    @classmethod
    def of(cls, d: DeadLetterDetail) -> DeadLetterDetailOut:
        return cls(
            delivery_id=d.delivery_id, event_id=d.event_id, conversation_id=d.conversation_id,
            type=d.type, attempts=d.attempts, failure_code=d.failure_code,
            published_at_us=d.published_at_us, settled_at_us=d.settled_at_us,
            payload=d.payload, payload_bytes=d.payload_bytes, schema_version=d.schema_version,
            operation_id=d.operation_id, last_lease_owner=d.last_lease_owner,
        )


class DeadLetterSettledOut(BaseModel):
    """What became of a dead letter an operator retried or discarded."""

    delivery_id: int
    conversation_id: str
    state: Literal["ready", "acknowledged"] = Field(description=(
        "ready: retried, to be delivered again with a fresh budget of attempts; acknowledged: "
        "discarded, settled without being delivered."))

    @classmethod
    def of(cls, s: Settled) -> DeadLetterSettledOut:
        return cls(delivery_id=s.delivery_id, conversation_id=s.conversation_id,
                   state=s.state)  # type: ignore[arg-type]


class InstanceOut(BaseModel):
    """One boot of a runtime over this database."""

    instance_id: str
    hostname: str
    pid: int
    state: Literal["live", "silent", "stopped"] = Field(description=(
        "live: heartbeating; silent: no heartbeat for longer than the instance timeout (taken "
        "for gone at the next sweep); stopped: retired, or reconciled as gone."))
    serving: bool = Field(description="The instance that answers this request.")
    started_at_us: int
    heartbeat_at_us: int
    stopped_at_us: int | None

    @classmethod
    def of(cls, i: InstanceRecord, *, serving: str) -> InstanceOut:
        return cls(instance_id=i.instance_id, hostname=i.hostname, pid=i.pid,
                   state=i.state,  # type: ignore[arg-type]
                   serving=i.instance_id == serving, started_at_us=i.started_at_us,
                   heartbeat_at_us=i.heartbeat_at_us, stopped_at_us=i.stopped_at_us)


class InstanceList(BaseModel):
    items: list[InstanceOut] = Field(description="Newest first.")


class SessionOut(BaseModel):
    """Who a token speaks for, and what this server offers."""

    principal: str | None = Field(description="The principal it speaks for; null: none.")
    operator: bool = Field(description="An operator's token: every conversation, and the "
                                       "operator's views and acts.")
    instance_id: str
    locked: bool = Field(description="Booted locked: waiting for an operator to unlock it.")
    models: list[str] = Field(description="The models a profile may name.")
    tools: list[str] = Field(description="The tools a profile may offer.")
    profiles: list[str] = Field(description="Named profiles a conversation may be opened with.")


class PushDeadLetterOut(BaseModel):
    """An A2A push notification that failed for good; nothing replays it."""

    delivery_id: int
    notification_id: str = Field(description="The id every attempt carried "
                                             "(X-A2A-Notification-Id).")
    task_id: str
    owner: str
    config_id: str
    context_id: str
    event_seq: int
    event_type: str
    attempts: int
    failure_code: str
    published_at_us: int
    settled_at_us: int

    @classmethod
    def of(cls, d: PushDeadLetter) -> PushDeadLetterOut:
        return cls(delivery_id=d.delivery_id, notification_id=f"{d.task_id}.{d.event_seq}",
                   task_id=d.task_id, owner=d.owner, config_id=d.config_id,
                   context_id=d.conversation_id, event_seq=d.event_seq,
                   event_type=d.event_type, attempts=d.attempts, failure_code=d.failure_code,
                   published_at_us=d.published_at_us, settled_at_us=d.settled_at_us)


class PushDeadLetterList(BaseModel):
    items: list[PushDeadLetterOut]
