"""The HTTP bodies of a conversation: opening it, its profile and goal, reading it and listing
conversations (re-exported by :mod:`tidings.service.schemas`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from pydantic import BaseModel, Field

from tidings.conversations.catalog import ConversationSummary
from tidings.service.schemas.request import RequestBody
from tidings.types import Conversation, GoalStatus, Profile, RunStatus, Usage


class ProfileBody(RequestBody):
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


class ConversationCreate(RequestBody):
    profile: ProfileBody | str = Field(
        description="The agent's profile, or the name of a profile the service was given."
    )
    title: str = ""


class ProfileChange(RequestBody):
    """A conversation's new profile: checked as at create; the next turn uses it."""

    profile: ProfileBody | str = Field(
        description="The agent's profile, or the name of a profile the service was given."
    )


class GoalUpdate(RequestBody):
    status: GoalStatus
    text: str | None = None


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

