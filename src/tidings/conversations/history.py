"""A conversation as a reader sees it: its record, its transcript, its journal and its runs.

Every read that names an owner answers a foreign conversation exactly as it answers an unknown
one (:class:`UnknownConversationError`), so a principal cannot learn that someone else's
conversation exists; a run of such a conversation is an unknown run. Pages are bounded
(:data:`MAX_PAGE`). :class:`~tidings.conversations.catalog.Conversations` offers these reads
as its own methods.
"""

from __future__ import annotations

import json
from dataclasses import replace

from tidings.conversations.journal import read_events
from tidings.errors import InvalidInputError, UnknownConversationError, UnknownRunError
from tidings.records.rows import (
    conversation_from_row,
    message_from_row,
    run_from_row,
    usage_from_row,
)
from tidings.store import Row, Store, Tx
from tidings.support.policy import check_id, check_position
from tidings.types import Conversation, ConversationStatus, Event, Message, Run

MAX_PAGE = 1_000


def check_page(limit: int) -> int:
    """A page's ``limit``, between 1 and :data:`MAX_PAGE`."""
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidInputError(f"limit must be between 1 and {MAX_PAGE}")
    return limit


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


class History:
    """A conversation's record and its readable history: transcript, journal, runs."""

    store: Store

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
                limit=check_page(limit),
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
        page = check_page(limit)
        return await self.store.read(
            lambda tx: read_events(tx, conversation_id, after_seq=after_seq, limit=page)
        )

    async def runs(
        self, conversation_id: str, *, limit: int = MAX_PAGE, owner: str | None = None
    ) -> list[Run]:
        await self.get(conversation_id, owner=owner)
        rows = await self.store.read(
            lambda tx: tx.all(
                "list_runs", conversation_id=conversation_id, limit=check_page(limit)
            )
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


__all__ = ("MAX_PAGE", "History", "check_page")
