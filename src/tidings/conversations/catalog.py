"""Conversations: create, read, archive, tombstone; profiles and goals; transcript and journal.

A conversation belongs to one owner principal. Every read that names an owner answers a
foreign conversation exactly as it answers an unknown one (:class:`UnknownConversationError`),
so a principal cannot learn that someone else's conversation exists.

This module creates, lists and changes conversations. The reads of one conversation (its
record, transcript, journal and runs) are :mod:`.history`, which :class:`Conversations` offers
as its own methods; a page of the journal is read and filled in by :mod:`.journal`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, TypeVar

from tidings.clock import Clock
from tidings.conversations.history import History, check_page
from tidings.errors import InvalidInputError, UnknownConversationError, UnknownModelOrToolError
from tidings.records.rows import conversation_from_row, encode_profile, run_status
from tidings.records.transcript import ConversationTx
from tidings.store import Row, Store, Tx
from tidings.support.policy import check_cursor, check_id, check_text
from tidings.types import (
    Conversation,
    ConversationId,
    ConversationStatus,
    GoalStatus,
    Profile,
    RunId,
    RunStatus,
    new_id,
)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RunGlance:
    """A conversation's newest run, as a list shows it."""

    run_id: RunId
    status: RunStatus
    model: str | None
    failure_code: str | None
    started_at_us: int | None
    ended_at_us: int | None


@dataclass(frozen=True, slots=True)
class ConversationSummary:
    """A conversation in a list: the record, when it last did anything (its newest journal
    event), and its newest run -- running, awaiting approval, or how it ended -- if any."""

    conversation: Conversation
    last_activity_us: int
    run: RunGlance | None


def summary_from_row(row: Row) -> ConversationSummary:
    run = None
    if row["run_run_id"] is not None:
        run = RunGlance(
            RunId(row["run_run_id"]),
            run_status(row["run_status"], awaiting_approval=bool(row["run_awaiting_approval"])),
            row["run_model"], row["run_failure_code"], row["run_started_at_us"],
            row["run_ended_at_us"],
        )
    conversation = conversation_from_row(row)
    last = row["last_activity_us"]
    return ConversationSummary(
        conversation, conversation.created_at_us if last is None else int(last), run)


def check_profile(profile: Profile) -> Profile:
    """A profile names at least one model; names are bounded identifiers."""
    for name in profile.models:
        check_id(name, "model name")
    for tool in profile.tools:
        check_id(tool, "tool name")
    stray = [t for t in profile.background if t not in profile.tools]
    if stray:
        raise InvalidInputError(f"background names tools the profile does not offer: {stray}")
    check_text(profile.system, "system prompt", limit_bytes=64 * 1024)
    if profile.approval_mode not in ("never", "always", "writes"):
        raise InvalidInputError("approval_mode must be one of never, always, writes")
    return profile


Registered = Callable[[], tuple[Collection[str], Collection[str]]]
"""The names a runtime has now: its models', its tools'."""


def check_registered(profile: Profile, registered: Registered | None) -> None:
    """Refuse a profile that names a model or a tool the runtime does not have (B7): it would
    fail only later, deep in a run. ``None`` checks nothing (a store without a runtime)."""
    if registered is None:
        return
    models, tools = registered()
    unknown_models = [m for m in dict.fromkeys(profile.models) if m not in models]
    unknown_tools = [t for t in dict.fromkeys(profile.tools) if t not in tools]
    if unknown_models or unknown_tools:
        raise UnknownModelOrToolError(
            unknown_models=unknown_models, unknown_tools=unknown_tools,
            registered_models=sorted(models), registered_tools=sorted(tools),
        )


class Conversations(History):
    """Conversation records and their readable history."""

    def __init__(self, store: Store, clock: Clock, registered: Registered | None = None) -> None:
        self.store = store
        self.clock = clock
        self.registered = registered
        """What a new or changed profile may name (the runtime's models and tools)."""

    async def create(
        self, owner: str, profile: Profile, *, title: str = "", checked: bool = True
    ) -> Conversation:
        """A new conversation; ``checked`` refuses a profile naming what is not registered."""
        check_id(owner, "owner")
        check_profile(profile)
        if checked:
            check_registered(profile, self.registered)
        check_text(title, "title", limit_bytes=1024)
        conversation_id = new_id("conv")

        def unit(tx: Tx) -> Conversation:
            row = tx.one(
                "insert_conversation",
                conversation_id=conversation_id,
                owner=owner,
                title=title,
                profile=encode_profile(profile),
                now_us=self.clock.now_us(),
            )
            assert row is not None
            cx = ConversationTx(tx, row, self.clock)
            cx.record_event("conversation_created", {"owner": owner})
            cx.save()
            return cx.conversation

        return await self.store.transact(unit, route=conversation_id)

    async def profile_of(self, conversation_id: str) -> Profile:
        return (await self.get(conversation_id)).profile

    async def create_child(self, parent_id: str, title: str) -> ConversationId:
        """A conversation for a parent's child request: the parent's owner and profile."""
        parent = await self.get(parent_id)
        # The parent's profile was checked when it was set: a child is not refused for it.
        child = await self.create(parent.owner, parent.profile, title=title[:200],
                                  checked=False)
        return child.conversation_id

    async def list_owned(
        self, owner: str, *, after: str = "", limit: int = 100
    ) -> list[Conversation]:
        check_id(owner, "owner")
        check_cursor(after, "after")
        rows = await self.store.read(
            lambda tx: tx.all(
                "list_conversations", owner=owner, after=after, limit=check_page(limit)
            )
        )
        return [conversation_from_row(r) for r in rows]

    async def summaries(
        self, owner: str | None, *, after: str = "", limit: int = 100, newest_first: bool = False
    ) -> list[ConversationSummary]:
        """A page of conversations with their last activity and newest run: ``owner``'s, or
        every owner's (``None``: an operator's view); by id, oldest or ``newest_first``.
        ``after`` is the last id of the previous page."""
        if owner is not None:
            check_id(owner, "owner")
        check_cursor(after, "after")
        name = ("summaries_owned" if owner is not None else "summaries_all") + (
            "_newest" if newest_first else "")
        params: dict[str, Any] = {"after": after, "limit": check_page(limit)}
        if owner is not None:
            params["owner"] = owner
        rows = await self.store.read(lambda tx: tx.all(name, **params))
        return [summary_from_row(r) for r in rows]

    async def change(
        self,
        conversation_id: str,
        change: Callable[[ConversationTx], T],
        *,
        owner: str | None = None,
    ) -> T:
        """Run ``change`` on the locked conversation in a unit of its own."""
        check_id(conversation_id, "conversation id")

        def unit(tx: Tx) -> T:
            cx = ConversationTx.lock(tx, conversation_id, self.clock)
            c = cx.conversation
            if c.status is ConversationStatus.TOMBSTONED or (
                owner is not None and c.owner != owner
            ):
                raise UnknownConversationError(conversation_id)
            result = change(cx)
            cx.save()
            return result

        return await self.store.transact(unit, route=conversation_id)

    async def archive(self, conversation_id: str, *, owner: str | None = None) -> Conversation:
        """Archived conversations take no more callers' input; the kernel's mail still runs."""

        def change(cx: ConversationTx) -> Conversation:
            if cx.conversation.status is not ConversationStatus.ARCHIVED:
                cx.update(status=ConversationStatus.ARCHIVED)
                cx.record_event("conversation_status", {"status": "archived"})
            return cx.conversation

        return await self.change(conversation_id, change, owner=owner)

    async def unarchive(self, conversation_id: str, *, owner: str | None = None) -> Conversation:
        """Undo an archive: the conversation takes callers' input again. An active one is left
        as it is."""

        def change(cx: ConversationTx) -> Conversation:
            if cx.conversation.status is ConversationStatus.ARCHIVED:
                cx.update(status=ConversationStatus.ACTIVE)
                cx.record_event("conversation_status", {"status": "active"})
            return cx.conversation

        return await self.change(conversation_id, change, owner=owner)

    async def tombstone(self, conversation_id: str, *, owner: str | None = None) -> Conversation:
        """Delete: the conversation stops answering and is unknown to every reader from now."""

        def change(cx: ConversationTx) -> Conversation:
            cx.update(status=ConversationStatus.TOMBSTONED)
            cx.record_event("conversation_status", {"status": "tombstoned"})
            return cx.conversation

        return await self.change(conversation_id, change, owner=owner)

    async def set_profile(
        self, conversation_id: str, profile: Profile, *, owner: str | None = None
    ) -> Conversation:
        check_profile(profile)
        check_registered(profile, self.registered)

        def change(cx: ConversationTx) -> Conversation:
            cx.update(profile=profile)
            cx.record_event("profile_changed", {"model": profile.model})
            return cx.conversation

        return await self.change(conversation_id, change, owner=owner)

    async def set_goal(
        self,
        conversation_id: str,
        status: GoalStatus | str,
        text: str | None = None,
        *,
        owner: str | None = None,
    ) -> Conversation:
        """Set, pause, block, resume or finish the conversation's goal."""
        try:
            goal_status = GoalStatus(status)
        except ValueError:
            raise InvalidInputError(f"unknown goal status {status!r}") from None
        if text is not None:
            check_text(text, "goal", limit_bytes=16 * 1024)

        def change(cx: ConversationTx) -> Conversation:
            goal_text = cx.conversation.goal_text if text is None else text
            cx.update(goal_status=goal_status, goal_text=goal_text)
            cx.record_event("goal_status", {"status": goal_status.value})
            return cx.conversation

        return await self.change(conversation_id, change, owner=owner)


__all__ = (
    "ConversationSummary", "Conversations", "Registered", "RunGlance", "check_profile",
    "check_registered",
)
