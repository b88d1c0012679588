"""The HTTP bodies of the door: a person's input, the inputs as they wait, and a waiting post's
answer (re-exported by :mod:`tidings.service.schemas`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from tidings.service.schemas.request import RequestBody
from tidings.service.schemas.runs import RunOut
from tidings.types import Answer, DeliveryMode, Input


class InputCreate(RequestBody):
    """A person's input. Its origin is always ``person``; the kernel's fields are refused."""

    content: str
    delivery_mode: DeliveryMode = DeliveryMode.QUEUE
    idempotency_key: str | None = Field(
        default=None, description="A repeated key returns the first input and writes nothing."
    )
    meta: dict[str, Any] | None = None


class AuthorOut(BaseModel):
    kind: str
    handle: str
    display_name: str


class InputOut(BaseModel):
    input_id: str
    conversation_id: str
    queue_position: int = Field(description="The arrival number (read order is listed order).")
    origin: str
    authored_by: AuthorOut
    sender_conversation_id: str | None
    run_public_id: str | None
    task_key: str | None
    delivery_mode: str
    content: str
    meta: dict[str, Any]
    state: str
    run_id: str | None
    accepted_at_us: int

    @classmethod
    def of(cls, i: Input) -> InputOut:
        return cls(
            input_id=i.input_id, conversation_id=i.conversation_id,
            queue_position=i.queue_position, origin=i.origin.value,
            authored_by=AuthorOut(kind=i.authored_by.kind.value, handle=i.authored_by.handle,
                                  display_name=i.authored_by.display_name),
            sender_conversation_id=i.sender_conversation_id, run_public_id=i.run_public_id,
            task_key=i.task_key, delivery_mode=i.delivery_mode.value, content=i.content,
            meta=dict(i.meta), state=i.state.value, run_id=i.run_id,
            accepted_at_us=i.accepted_at_us,
        )


class InputList(BaseModel):
    items: list[InputOut] = Field(description="In read order: kernel mail first, then arrival.")


AnswerStatus = Literal["queued", "running", "awaiting_approval", "completed", "failed",
                       "needs_attention", "stopped", "cancelled"]


class AnswerOut(BaseModel):
    """A waiting post's answer (``?wait=``): the input, the run that read it, its reply."""

    status: AnswerStatus = Field(description=(
        "The run's status: completed, failed, needs_attention, stopped or awaiting_approval "
        "when the wait ended on it; running on a timeout. Without a run, the input's state: "
        "queued (no run has taken it yet) or cancelled (withdrawn before any run read it)."))
    timed_out: bool = Field(description=(
        "true: the wait ended before the answer (its ?wait= passed, or the server is shutting "
        "down) and this is how things stood; the input stays accepted, and is read and "
        "answered later like any other."))
    input: InputOut
    run: RunOut | None = Field(description=(
        "The run that read the input: the turn it started, the later turn that took it from "
        "the queue, or the running turn it joined as a steer. null while no run has it."))
    reply: str | None = Field(description=(
        "The run's final assistant text; null while it has none (running, awaiting approval, "
        "failed, ...)."))

    @classmethod
    def of(cls, a: Answer) -> AnswerOut:
        return cls(
            status=a.status.value,  # type: ignore[arg-type]
            timed_out=a.timed_out, input=InputOut.of(a.input),
            run=None if a.run is None else RunOut.of(a.run), reply=a.reply,
        )

