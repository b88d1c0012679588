"""The HTTP bodies of what a conversation's turns wrote and did, and of the acts on them: the
transcript, the runs, stopping, compacting, retrying, a goal's checkpoint and a restart
(re-exported by :mod:`tidings.service.schemas`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from tidings.service.schemas.conversations import UsageOut
from tidings.service.schemas.request import RequestBody
from tidings.types import Message, Run, RunStatus


class RetryCreate(RequestBody):
    """Retry a failed run (or one that needs attention), optionally naming a model to try
    first; it must be one of the profile's models."""

    model: str | None = Field(default=None, max_length=200)


class RestartCreate(RequestBody):
    reason: str = Field(default="", max_length=500)
    idempotency_key: str | None = None


class MessageOut(BaseModel):
    seq: int
    message_id: str
    run_id: str | None
    role: str
    content: str
    tool_calls: list[dict[str, Any]]
    tool_call_id: str | None
    tool_name: str | None
    origin: str | None
    input_id: str | None
    meta: dict[str, Any]
    created_at_us: int

    @classmethod
    def of(cls, m: Message) -> MessageOut:
        return cls(
            seq=m.seq, message_id=m.message_id, run_id=m.run_id, role=m.role, content=m.content,
            tool_calls=[dict(c) for c in m.tool_calls], tool_call_id=m.tool_call_id,
            tool_name=m.tool_name, origin=None if m.origin is None else m.origin.value,
            input_id=m.input_id, meta=dict(m.meta), created_at_us=m.created_at_us,
        )


class Transcript(BaseModel):
    conversation_id: str
    items: list[MessageOut]
    next_after_seq: int = Field(description="Pass as ?after_seq= to read what comes next.")


class RunOut(BaseModel):
    run_id: str
    conversation_id: str
    trigger: str
    status: RunStatus = Field(description=(
        "awaiting_approval: running, and holding on a tool call a person has not decided yet "
        "(see the conversation's approvals); queued, running and awaiting_approval are the "
        "only statuses that are not final."))
    model: str | None
    failure_code: str | None
    steps: int
    created_at_us: int
    started_at_us: int | None
    ended_at_us: int | None
    usage: UsageOut = Field(description=(
        "What the run's model calls spent, written with its end (zero while it runs); a "
        "failed or stopped run keeps what it spent."))
    model_failures: list[dict[str, Any]] = Field(default_factory=list, description=(
        "For a run that ended without an answer after its models failed: each model asked, in "
        "order, and why it failed -- model, reason (not registered, cooling down, HTTP 503, "
        "timed out, ...), kind, status, error_class, message (an excerpt) and attempts."))

    @classmethod
    def of(cls, r: Run) -> RunOut:
        return cls(
            run_id=r.run_id, conversation_id=r.conversation_id, trigger=r.trigger.value,
            status=r.status, model=r.model, failure_code=r.failure_code, steps=r.steps,
            created_at_us=r.created_at_us, started_at_us=r.started_at_us,
            ended_at_us=r.ended_at_us, usage=UsageOut.of(r.usage),
            model_failures=[dict(f) for f in r.model_failures],
        )


class RunList(BaseModel):
    items: list[RunOut]


class Stopped(BaseModel):
    run_ids: list[str] = Field(description="The runs asked to stop.")


class RunStopped(BaseModel):
    """A source run stopped: its queued supplementary inputs that were removed."""

    cancelled_inputs: list[str]


class Compacted(BaseModel):
    message_seq: int = Field(description="The position of the summary message.")


class Accepted(BaseModel):
    status: Literal["accepted"] = "accepted"


class RestartAccepted(BaseModel):
    """A restart is accepted, not completed: the next instance completes it."""

    operation_id: str
    status: Literal["accepted"] = "accepted"
    completed: bool = False

