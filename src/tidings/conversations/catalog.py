"""Conversations: create, read, archive, tombstone; profiles and goals; transcript and journal.

A conversation belongs to one owner principal. Every read that names an owner answers a
foreign conversation exactly as it answers an unknown one (:class:`UnknownConversationError`),
so a principal cannot learn that someone else's conversation exists.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from tidings.clock import Clock
from tidings.errors import (
    InvalidInputError,
    UnknownConversationError,
    UnknownModelOrToolError,
    UnknownRunError,
)
from tidings.records.rows import (
    conversation_from_row,
    encode_profile,
    event_from_row,
    message_from_row,
    run_from_row,
    run_status,
    usage_from_row,
)
from tidings.records.transcript import INPUT_ACCEPTED, MESSAGE_COMMITTED, ConversationTx
from tidings.store import Row, Store, Tx
from tidings.support.policy import check_cursor, check_id, check_position, check_text
from tidings.types import (
    Conversation,
    ConversationId,
    ConversationStatus,
    Event,
    GoalStatus,
    Message,
    Origin,
    Profile,
    Run,
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

MAX_PAGE = 1_000


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


def _visible(row: Row | None, conversation_id: str, owner: str | None) -> Conversation:
    """The conversation of ``row``, if it exists, is not tombstoned and (when given) is
    ``owner``'s; else, to the caller, it is unknown."""
    if row is None:
        raise UnknownConversationError(conversation_id)
    conversation = conversation_from_row(row)
    if conversation.status is ConversationStatus.TOMBSTONED or (
        owner is not None and conversation.owner != owner
    ):
        raise UnknownConversationError(conversation_id)
    return conversation


def read_events(tx: Tx, conversation_id: str, *, after_seq: int, limit: int) -> list[Event]:
    """A page of the journal after ``after_seq``, each ``message_committed`` event filled in
    with its message from the transcript and each ``input_accepted`` with the input's text and
    whether it is the runtime's own words (one more query for each kind the page holds).

    The journal row keeps only the message's position or the input's id; its text is written
    once, in the transcript or the inputs.
    """
    events = [event_from_row(r) for r in tx.all(
        "events_after", conversation_id=conversation_id, after_seq=after_seq, limit=limit,
    )]
    seqs = [int(e.data["message_seq"]) for e in events
            if e.type == MESSAGE_COMMITTED and "message_seq" in e.data]
    input_ids = [str(e.data["input_id"]) for e in events
                 if e.type == INPUT_ACCEPTED and "input_id" in e.data]
    messages = {
        m.seq: m for m in map(message_from_row, tx.all(
            "messages_by_seq", conversation_id=conversation_id, seqs=seqs,
        ))
    } if seqs else {}
    contents = {
        str(r["input_id"]): str(r["content"]) for r in tx.all(
            "inputs_content_by_id", conversation_id=conversation_id, input_ids=input_ids,
        )
    } if input_ids else {}
    if not messages and not contents:
        return events

    def filled(e: Event) -> Event:
        if e.type == MESSAGE_COMMITTED:
            message = messages.get(int(e.data.get("message_seq", 0)))
            return e if message is None else replace(e, data=committed_data(message))
        if e.type == INPUT_ACCEPTED and (text := contents.get(str(e.data.get("input_id")))):
            return replace(e, data={**e.data, "content": text,
                                    "by_runtime": e.data.get("origin") != Origin.PERSON.value})
        return e

    return [filled(e) for e in events]


def committed_data(message: Message) -> dict[str, Any]:
    """What a ``message_committed`` event says: the message, and whether these are the
    runtime's own words (a task's notice, a child's mail, any other input not a person's
    words) rather than a person's."""
    return {
        "message": {
            "seq": message.seq,
            "message_id": message.message_id,
            "role": message.role,
            "content": message.content,
            "tool_calls": [
                {"call_id": c["call_id"], "name": c["name"], "arguments": c["arguments"]}
                for c in message.tool_calls
            ],
            "tool_call_id": message.tool_call_id,
            "tool_name": message.tool_name,
            "origin": None if message.origin is None else message.origin.value,
            "input_id": message.input_id,
            "run_id": message.run_id,
            "step": message.meta.get("step") if message.role == "assistant" else None,
        },
        "by_runtime": message.role == "user" and message.origin is not Origin.PERSON,
    }


def _page(limit: int) -> int:
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidInputError(f"limit must be between 1 and {MAX_PAGE}")
    return limit


class Conversations:
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

    async def get(
        self, conversation_id: str, *, owner: str | None = None, with_usage: bool = False
    ) -> Conversation:
        """The conversation, if it exists, is not tombstoned and (when given) is ``owner``'s.

        ``with_usage`` sums its runs' usage in the same read (a conversation's own read; the
        many ownership checks do without).
        """
        check_id(conversation_id, "conversation id")

        def read(tx: Tx) -> tuple[Row | None, Row | None]:
            row = tx.one("get_conversation", conversation_id=conversation_id)
            if row is None or not with_usage:
                return row, None
            return row, tx.one("conversation_usage", conversation_id=conversation_id)

        row, usage = await self.store.read(read)
        conversation = _visible(row, conversation_id, owner)
        if usage is not None:
            conversation = replace(conversation, usage=usage_from_row(usage))
        return conversation

    async def head(self, conversation_id: str, *, owner: str | None = None) -> int:
        """How far the conversation's journal has come (its last event's seq, 0 for none): a
        watch after it misses nothing that happens from now on. One row, however long the
        journal."""
        check_id(conversation_id, "conversation id")
        row = await self.store.read(
            lambda tx: tx.one("get_conversation", conversation_id=conversation_id))
        _visible(row, conversation_id, owner)
        assert row is not None
        return int(row["last_event_seq"])

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
            lambda tx: tx.all("list_conversations", owner=owner, after=after, limit=_page(limit))
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
        params: dict[str, Any] = {"after": after, "limit": _page(limit)}
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

    async def transcript(
        self,
        conversation_id: str,
        *,
        after_seq: int = 0,
        limit: int = MAX_PAGE,
        owner: str | None = None,
    ) -> list[Message]:
        check_position(after_seq, "after_seq")
        await self.get(conversation_id, owner=owner)
        rows = await self.store.read(
            lambda tx: tx.all(
                "transcript",
                conversation_id=conversation_id,
                after_seq=after_seq,
                limit=_page(limit),
            )
        )
        return [message_from_row(r) for r in rows]

    async def run_transcript(
        self, conversation_id: str, run_id: str, *, owner: str | None = None
    ) -> list[Message]:
        """The messages one run wrote, in order, however long the conversation is (one read,
        the ownership check in it)."""
        check_id(conversation_id, "conversation id")
        check_id(run_id, "run id")

        def read(tx: Tx) -> list[Row]:
            row = tx.one("get_conversation", conversation_id=conversation_id)
            _visible(row, conversation_id, owner)
            rows: list[Row] = []
            while True:
                page = tx.all("run_transcript", conversation_id=conversation_id, run_id=run_id,
                              after_seq=rows[-1]["seq"] if rows else 0, limit=MAX_PAGE)
                rows.extend(page)
                if len(page) < MAX_PAGE:
                    return rows

        rows = await self.store.read(read)
        return [message_from_row(r) for r in rows]

    async def events(
        self,
        conversation_id: str,
        *,
        after_seq: int = 0,
        limit: int = MAX_PAGE,
        owner: str | None = None,
    ) -> list[Event]:
        """Journal rows after ``after_seq``, in order: a client resumes from its last seq."""
        check_position(after_seq, "after_seq")
        await self.get(conversation_id, owner=owner)
        page = _page(limit)
        return await self.store.read(
            lambda tx: read_events(tx, conversation_id, after_seq=after_seq, limit=page)
        )

    async def runs(
        self, conversation_id: str, *, limit: int = MAX_PAGE, owner: str | None = None
    ) -> list[Run]:
        await self.get(conversation_id, owner=owner)
        rows = await self.store.read(
            lambda tx: tx.all("list_runs", conversation_id=conversation_id, limit=_page(limit))
        )
        return [run_from_row(r) for r in rows]

    async def models_spent(self, conversation_id: str, run_id: str) -> list[str]:
        """The models whose attempts an ended run spent (its final ``turn_status`` says)."""
        row = await self.store.read(lambda tx: tx.one(
            "last_turn_status", conversation_id=conversation_id, run_id=run_id
        ))
        spent = json.loads(row["data"]).get("models_spent", []) if row is not None else []
        return [str(m) for m in spent]

    async def run(self, run_id: str, *, owner: str | None = None) -> Run:
        check_id(run_id, "run id")
        row = await self.store.read(lambda tx: tx.one("get_run", run_id=run_id))
        if row is None:
            raise UnknownRunError(run_id)
        run = run_from_row(row)
        try:
            await self.get(run.conversation_id, owner=owner)
        except UnknownConversationError:
            raise UnknownRunError(run_id) from None
        return run


__all__ = (
    "MESSAGE_COMMITTED", "ConversationSummary", "Conversations", "Registered", "RunGlance",
    "check_profile", "check_registered", "committed_data", "read_events",
)
