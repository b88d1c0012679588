"""The HTTP bodies: pydantic models of the service layer only, converted explicitly from (and
to) the runtime's frozen records, so the OpenAPI schema says exactly what is sent.

Request models forbid unknown fields: an input that carries ``origin``, ``authored_by`` or a
kernel stamp is refused, never silently dropped (M1).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tidings.conversations.approvals import Approval
from tidings.conversations.catalog import ConversationSummary
from tidings.conversations.questions import Question
from tidings.service.schemas.background import CancelledRequestOut as CancelledRequestOut
from tidings.service.schemas.background import ChildCancelled as ChildCancelled
from tidings.service.schemas.background import ChildRequestList as ChildRequestList

# Background work (children, tasks, results) has its own module; its bodies are re-exported.
from tidings.service.schemas.background import ChildRequestOut as ChildRequestOut
from tidings.service.schemas.background import DropOut as DropOut
from tidings.service.schemas.background import ResultList as ResultList
from tidings.service.schemas.background import ResultPageOut as ResultPageOut
from tidings.service.schemas.background import ResultRefOut as ResultRefOut
from tidings.service.schemas.background import TaskOut as TaskOut
from tidings.service.schemas.background import TaskPage as TaskPage
from tidings.service.schemas.operator import DeadLetterDetailOut as DeadLetterDetailOut
from tidings.service.schemas.operator import DeadLetterSettledOut as DeadLetterSettledOut
from tidings.service.schemas.operator import InstanceList as InstanceList
from tidings.service.schemas.operator import InstanceOut as InstanceOut
from tidings.service.schemas.operator import PushDeadLetterList as PushDeadLetterList
from tidings.service.schemas.operator import PushDeadLetterOut as PushDeadLetterOut
from tidings.service.schemas.operator import SessionOut as SessionOut
from tidings.types import (
    Answer,
    Conversation,
    DeadLetter,
    DeliveryMode,
    Event,
    FeedEvent,
    GoalStatus,
    Input,
    Message,
    Profile,
    QueueStats,
    Run,
    RunStatus,
    Usage,
)

# -- requests ----------------------------------------------------------------------------------


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ProfileBody(_Request):
    """The answering agent: model intent and ordered fallbacks, tools, approval mode."""

    model: str = Field(min_length=1, max_length=200, description="The model intent.")
    fallbacks: list[str] = Field(default_factory=list, description="Ordered fallback models.")
    tools: list[str] = Field(default_factory=list, description="Tool names it may call.")
    approval_mode: Literal["never", "always", "writes"] = "never"
    system: str | None = Field(default=None, description="The system prompt.")
    automatic_tools: Literal["read_only", "all"] = Field(
        default="read_only", description="The tools turns nobody asked for get (a woken "
        "turn, a child's reply): read_only or all."
    )
    background: list[str] = Field(
        default_factory=list, description="Tools (of tools) called as background tasks where "
        "they can be: an MCP server's, when the server runs tasks.")

    def to_profile(self) -> Profile:
        base = Profile(model=self.model, fallbacks=tuple(self.fallbacks), tools=tuple(self.tools),
                       approval_mode=self.approval_mode, automatic_tools=self.automatic_tools,
                       background=tuple(self.background))
        return base if self.system is None else replace(base, system=self.system)


class ConversationCreate(_Request):
    profile: ProfileBody | str = Field(
        description="The agent's profile, or the name of a profile the service was given."
    )
    title: str = ""


class ProfileChange(_Request):
    """A conversation's new profile: checked as at create; the next turn uses it."""

    profile: ProfileBody | str = Field(
        description="The agent's profile, or the name of a profile the service was given."
    )


class InputCreate(_Request):
    """A person's input. Its origin is always ``person``; the kernel's fields are refused."""

    content: str
    delivery_mode: DeliveryMode = DeliveryMode.QUEUE
    idempotency_key: str | None = Field(
        default=None, description="A repeated key returns the first input and writes nothing."
    )
    meta: dict[str, Any] | None = None


class Decision(_Request):
    """A person's decision on a held tool call."""

    approve: bool


class QuestionAnswer(_Request):
    """A person's answer to a question an MCP server asked: ``accept`` with ``content`` that
    fits the question's schema, ``decline`` or ``cancel``."""

    action: Literal["accept", "decline", "cancel"]
    content: dict[str, Any] | None = None


class RetryCreate(_Request):
    """Retry a failed run (or one that needs attention), optionally naming a model to try
    first; it must be one of the profile's models."""

    model: str | None = Field(default=None, max_length=200)


class RestartCreate(_Request):
    reason: str = Field(default="", max_length=500)
    idempotency_key: str | None = None


class GoalUpdate(_Request):
    status: GoalStatus
    text: str | None = None


# -- responses ---------------------------------------------------------------------------------


class ProfileOut(BaseModel):
    model: str
    fallbacks: list[str]
    tools: list[str]
    approval_mode: str
    system: str
    automatic_tools: str
    background: list[str]

    @classmethod
    def of(cls, p: Profile) -> ProfileOut:
        return cls(model=p.model, fallbacks=list(p.fallbacks), tools=list(p.tools),
                   approval_mode=p.approval_mode, system=p.system,
                   automatic_tools=p.automatic_tools, background=list(p.background))


class UsageOut(BaseModel):
    """What model calls spent, as the providers reported it."""

    model_calls: int = Field(description="Model calls made, answered or failed.")
    input_tokens: int = Field(description="Every prompt token, cached ones included.")
    output_tokens: int
    cache_read_tokens: int = Field(
        description="The part of input_tokens read from the provider's prompt cache.")
    cache_write_tokens: int = Field(
        description="The part of input_tokens written to the provider's prompt cache.")

    @classmethod
    def of(cls, u: Usage) -> UsageOut:
        return cls(
            model_calls=u.model_calls, input_tokens=u.input_tokens, output_tokens=u.output_tokens,
            cache_read_tokens=u.cache_read_tokens, cache_write_tokens=u.cache_write_tokens,
        )


class ConversationOut(BaseModel):
    conversation_id: str
    owner: str
    title: str
    profile: ProfileOut
    status: str = Field(description="active, archived or tombstoned.")
    goal_status: GoalStatus
    goal_text: str | None
    suppressed: bool
    awaiting_person: bool
    created_at_us: int
    usage: UsageOut | None = Field(description=(
        "The sums of its runs' usage, on GET of the conversation; null in lists and in the "
        "answers of changes."))

    @classmethod
    def of(cls, c: Conversation) -> ConversationOut:
        return cls(
            conversation_id=c.conversation_id, owner=c.owner, title=c.title,
            profile=ProfileOut.of(c.profile), status=c.status.value, goal_status=c.goal_status,
            goal_text=c.goal_text, suppressed=c.suppressed, awaiting_person=c.awaiting_person,
            created_at_us=c.created_at_us,
            usage=None if c.usage is None else UsageOut.of(c.usage),
        )


class RunGlanceOut(BaseModel):
    """A conversation's newest run, at a glance."""

    run_id: str
    status: RunStatus
    model: str | None
    failure_code: str | None
    started_at_us: int | None
    ended_at_us: int | None


class ConversationSummaryOut(ConversationOut):
    """A conversation in a list, with when it last did anything and its newest run."""

    last_activity_us: int = Field(description="The time of its newest journal event.")
    run: RunGlanceOut | None = Field(description=(
        "Its newest run -- running, awaiting_approval, or how it ended -- null before any."))

    @classmethod
    def of_summary(cls, s: ConversationSummary) -> ConversationSummaryOut:
        r = s.run
        return cls(
            **ConversationOut.of(s.conversation).model_dump(), last_activity_us=s.last_activity_us,
            run=None if r is None else RunGlanceOut(
                run_id=r.run_id, status=r.status, model=r.model, failure_code=r.failure_code,
                started_at_us=r.started_at_us, ended_at_us=r.ended_at_us),
        )


class ConversationPage(BaseModel):
    items: list[ConversationSummaryOut]
    next_after: str | None = Field(description="Pass as ?after= for the next page; null at end.")


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


class EventOut(BaseModel):
    """One event of the feed: a journal row (``seq`` is the SSE id a feed resumes from), or a
    live event of an answer being written (``seq`` null: never stored)."""

    conversation_id: str
    seq: int | None
    type: str
    run_id: str | None
    data: dict[str, Any]
    at_us: int

    @classmethod
    def of(cls, e: Event | FeedEvent) -> EventOut:
        return cls(conversation_id=e.conversation_id, seq=e.seq, type=e.type, run_id=e.run_id,
                   data=dict(e.data), at_us=e.at_us)


class EventPage(BaseModel):
    items: list[EventOut]
    next_after: int = Field(description="The last seq seen: pass as ?after= (or Last-Event-ID).")


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


class Health(BaseModel):
    status: Literal["ok", "locked"] = Field(
        description="locked: started locked, waiting for the master key."
    )
    instance_id: str


class Unlock(_Request):
    master_key: str = Field(min_length=1, max_length=200,
                            description="The master key (64 hex characters).")


class ApprovalOut(BaseModel):
    approval_id: str
    conversation_id: str
    run_id: str
    call_id: str
    tool_name: str
    arguments: dict[str, Any]
    status: Literal["pending", "approved", "denied", "expired", "applied"]
    decided_by: str | None
    requested_at_us: int
    expires_at_us: int
    decided_at_us: int | None
    applied_at_us: int | None

    @classmethod
    def of(cls, a: Approval) -> ApprovalOut:
        return cls(
            approval_id=a.approval_id, conversation_id=a.conversation_id, run_id=a.run_id,
            call_id=a.call_id, tool_name=a.tool_name, arguments=a.arguments,
            status=a.status,  # type: ignore[arg-type]
            decided_by=a.decided_by, requested_at_us=a.requested_at_us,
            expires_at_us=a.expires_at_us, decided_at_us=a.decided_at_us,
            applied_at_us=a.applied_at_us,
        )


class ApprovalList(BaseModel):
    approvals: list[ApprovalOut]


class QuestionOut(BaseModel):
    """A question an MCP server asked a person of the conversation, and its answer."""

    question_id: str
    conversation_id: str
    run_id: str | None = Field(description="The run whose call waits on it (a call's).")
    task_key: str | None = Field(description="The background task that asked (a task's).")
    asker: str = Field(description="Who asks: mcp:<server>.")
    kind: Literal["elicitation", "sampling"] = Field(description=(
        "elicitation: the server asks for what requested_schema describes; sampling: the "
        "server asks for the conversation's model to answer (accept lets it)."))
    message: str
    requested_schema: dict[str, Any]
    status: Literal["pending", "accepted", "declined", "cancelled", "expired"]
    answer: dict[str, Any] | None
    decided_by: str | None
    requested_at_us: int
    expires_at_us: int
    decided_at_us: int | None
    delivered_at_us: int | None = Field(description="When the answer reached the server.")

    @classmethod
    def of(cls, q: Question) -> QuestionOut:
        return cls(
            question_id=q.question_id, conversation_id=q.conversation_id, run_id=q.run_id,
            task_key=q.task_id, asker=q.asker, kind=q.kind,  # type: ignore[arg-type]
            message=q.message, requested_schema=q.requested_schema,
            status=q.status,  # type: ignore[arg-type]
            answer=q.answer, decided_by=q.decided_by, requested_at_us=q.requested_at_us,
            expires_at_us=q.expires_at_us, decided_at_us=q.decided_at_us,
            delivered_at_us=q.delivered_at_us,
        )


class QuestionList(BaseModel):
    questions: list[QuestionOut]


class RestartAccepted(BaseModel):
    """A restart is accepted, not completed: the next instance completes it."""

    operation_id: str
    status: Literal["accepted"] = "accepted"
    completed: bool = False


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
