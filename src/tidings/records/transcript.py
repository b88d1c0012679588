"""A conversation locked inside a unit of work: the one writer of its state, messages and events.

Every unit that changes a conversation starts with :meth:`ConversationTx.lock` and ends with
:meth:`ConversationTx.save`. The lock (the conversation row: ``FOR UPDATE`` on PostgreSQL, the
single writer on SQLite) serialises all writers of one conversation, so arrival numbers,
message positions and event sequences are gap-free and commit ordered: a reader that resumes
"after sequence N" never misses a row that commits later with a smaller number.

Strict pairing is enforced by the store, not by good manners: while a tool call is open, the
``insert_message`` query refuses anything but its result, and this class raises
:class:`~tidings.errors.PairingViolationError` so the whole unit rolls back.

The conversation's slot (which turn, or compaction, may write, until when) lives on the same
row: :class:`Slot` (``cx.slot``) takes, fences and releases it there, and :meth:`save` writes it.

Each message is journalled as it is written: a ``message_committed`` event in the same unit,
holding only the message's position (the feed's reads fill in the rest).

Inputs are the mail's: :mod:`tidings.mail.door` writes them and :mod:`tidings.mail.queue` reads,
cancels and materializes them, as functions over this object (they keep the row's queue
counters, and :attr:`ConversationTx.accepted`, true in the same unit).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tidings.clock import Clock
from tidings.errors import PairingViolationError, SlotLostError, UnknownConversationError
from tidings.records.rows import conversation_from_row, encode_profile, message_from_row
from tidings.store import Row, Tx
from tidings.types import (
    Conversation,
    ConversationId,
    Input,
    Message,
    Origin,
    ToolCall,
    new_id,
)

MESSAGE_COMMITTED = "message_committed"
"""The journal event written with each transcript message (its data: the message's seq)."""
INPUT_ACCEPTED = "input_accepted"
"""The journal event written as an input enters (its data: the input's id and stamps; reads
add its text)."""

RUN_CHANGES = frozenset({"turn_status", "input_materialized", "input_cancelled"})
"""The events that change what a run or an input is: their unit tells the conversation's
watchers in this process once it commits (a wait for an input's answer wakes on them)."""


STATE_COLUMNS = (
    "queued_inputs", "last_queue_position", "last_message_seq", "last_event_seq",
    "history_start_seq", "slot_token", "slot_deadline_us", "slot_instance", "slot_run",
)
"""The conversation row's counters and slot: what most units change, and all that they write
back when the conversation's own fields (its profile, title, status, flags) are unchanged."""


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _json(value: Any) -> str:
    return _ENCODER.encode(value)  # one encoder: json.dumps makes one per call with options


@dataclass(slots=True, frozen=True)
class JournalWrite:
    """What one unit wrote to a conversation's journal, as reading its rows back would find
    it: the events (their data still JSON text), the messages they name and the text of the
    inputs they accept. Handed to this process's watchers with the commit's hint, so that
    they need not read back what the process itself just wrote."""

    conversation_id: str
    at_us: int
    events: Sequence[dict[str, Any]]
    """Each: ``seq``, ``type``, ``run_id`` and ``data`` (JSON text), as the rows hold them."""
    messages: dict[int, Message]
    """The messages this unit appended, by position."""
    inputs: dict[str, str]
    """The text of the inputs this unit wrote, by id."""


class Slot:
    """The conversation's slot as its locked row holds it: who runs a turn (or a compaction)
    on it, until when. Changes are written by :meth:`ConversationTx.save` with the row."""

    def __init__(self, cx: ConversationTx) -> None:
        self._cx = cx

    def holder(self) -> tuple[str | None, int | None, str | None]:
        """The slot's token, deadline and run (None when free)."""
        row = self._cx.row
        return row["slot_token"], row["slot_deadline_us"], row["slot_run"]

    def free(self) -> bool:
        token, deadline, _ = self.holder()
        return token is None or deadline is None or deadline <= self._cx.now_us

    def take(self, token: str, deadline_us: int, instance_id: str, run_id: str) -> None:
        self._cx.row.update(
            slot_token=token, slot_deadline_us=deadline_us, slot_instance=instance_id,
            slot_run=run_id,
        )

    def require(self, token: str) -> None:
        """Fence: the caller's writes go through only while it holds the unexpired slot."""
        held, deadline, _ = self.holder()
        if held != token or deadline is None or deadline <= self._cx.now_us:
            raise SlotLostError(self._cx.conversation_id)

    def release(self, token: str) -> None:
        row = self._cx.row
        if row["slot_token"] == token:
            row.update(slot_token=None, slot_deadline_us=None, slot_instance=None, slot_run=None)


class ConversationTx:
    """One conversation, locked for the rest of a unit of work. Call :meth:`save` last."""

    def __init__(self, tx: Tx, row: Row, clock: Clock) -> None:
        self.tx = tx
        self.row = dict(row)
        self.clock = clock
        self.now_us = clock.now_us()
        self.conversation = conversation_from_row(row)
        self._saved_conversation = self.conversation
        self._saved_state = tuple(map(self.row.__getitem__, STATE_COLUMNS))
        self._events: list[dict[str, Any]] = []
        self.appended: list[Message] = []
        self.accepted: list[Input] = []
        """The inputs this unit wrote that it has not read yet (the door appends, reading
        removes): when they are the whole queue, the queue is read without a query."""
        self.written_inputs: dict[str, str] = {}
        """The text of the inputs this unit wrote, by id (the door adds them): what a read of
        the journal fills ``input_accepted`` in with."""
        self.notified = False
        """Whether this unit delivered a task notification (it then waits unconsumed)."""
        self.changed_tasks: dict[str, Any] = {}
        """The task journal's records this unit wrote, newest per task id: when no
        notification waited undelivered as the unit began, only these can be due now."""

    @property
    def slot(self) -> Slot:
        """The conversation's slot, on its row: hold, fence and release it here. A view made
        when asked: held by the transaction, it would make a reference cycle, and every unit's
        transaction would wait for the garbage collector to be freed."""
        return Slot(self)

    locked_ns: int | None = None
    """The monotonic time (``time.monotonic_ns``) just before :meth:`lock` read the row: what
    this unit reads under the lock is the database as it stood at some moment after it."""

    @classmethod
    def lock(
        cls, tx: Tx, conversation_id: str, clock: Clock,
        *, ahead: Callable[[Tx], None] | None = None,
    ) -> ConversationTx:
        """Lock and read the conversation's row. ``ahead``, when given, says first what the
        unit reads right after the lock (:meth:`Tx.read_ahead`): a dialect may send the two
        together."""
        if ahead is not None:
            ahead(tx)
        began = time.monotonic_ns()
        row = tx.one("lock_conversation", conversation_id=conversation_id)
        if row is None:
            raise UnknownConversationError(conversation_id)
        cx = cls(tx, row, clock)
        cx.locked_ns = began
        return cx

    @property
    def conversation_id(self) -> ConversationId:
        return self.conversation.conversation_id

    # -- the conversation's own state ---------------------------------------------------------

    def update(self, **changes: Any) -> Conversation:
        """Change fields of the conversation (written by :meth:`save`)."""
        self.conversation = replace(self.conversation, **changes)
        return self.conversation

    def save(self) -> None:
        """Write the unit's events and the conversation's state and counters."""
        if self._events:
            if any(e["type"] in RUN_CHANGES for e in self._events):
                self.tx.changed(self.conversation_id)
            self.tx.run_later(
                "insert_events", conversation_id=self.conversation_id,
                items=_json(self._events), now_us=self.now_us,
            )
            self.tx.journaled(self.conversation_id, self._events[-1]["seq"], JournalWrite(
                self.conversation_id, self.now_us, self._events,
                {m.seq: m for m in self.appended}, self.written_inputs,
            ))
            self._events = []
            self.written_inputs = {}
        r = self.row
        state = tuple(map(r.__getitem__, STATE_COLUMNS))
        c = self.conversation
        if c is self._saved_conversation or c == self._saved_conversation:
            if state == self._saved_state:
                return  # nothing changed: no write
            # Only the counters and the slot: the profile is not encoded and written again.
            self._saved_state = state
            self.tx.run_later(
                "save_conversation_state", conversation_id=c.conversation_id,
                now_us=self.now_us, **dict(zip(STATE_COLUMNS, state, strict=True)),
            )
            return
        self._saved_conversation = c
        self._saved_state = state
        self.tx.run_later(
            "save_conversation",
            conversation_id=c.conversation_id,
            title=c.title,
            profile=encode_profile(c.profile),
            status=c.status.value,
            goal_status=c.goal_status.value,
            goal_text=c.goal_text,
            suppressed=int(c.suppressed),
            awaiting_person=int(c.awaiting_person),
            now_us=self.now_us,
            **dict(zip(STATE_COLUMNS, state, strict=True)),
        )

    # -- the journal --------------------------------------------------------------------------

    def record_event(self, type: str, data: dict[str, Any], run_id: str | None = None) -> int:
        """Journal an event; the unit's events are written together by :meth:`save`."""
        seq = int(self.row["last_event_seq"]) + 1
        self.row["last_event_seq"] = seq
        self._events.append({"seq": seq, "type": type, "run_id": run_id, "data": _json(data)})
        return seq

    # -- what waits (counters kept on the conversation row, read with the lock) ------------

    @property
    def queued_count(self) -> int:
        """How many inputs wait in the queue (a counter kept on the conversation row)."""
        return int(self.row["queued_inputs"])

    @property
    def undelivered_notifications(self) -> bool:
        """Whether an ended task's notification waited undelivered when the unit began."""
        return bool(self.row.get("undelivered_notifications"))

    @property
    def unconsumed_notifications(self) -> bool:
        """Whether a delivered notification waited unconsumed when the unit began."""
        return bool(self.row.get("unconsumed_notifications"))

    @property
    def signal_backlog(self) -> int:
        """Unacknowledged signals of the conversation when it was locked."""
        return int(self.row.get("signal_backlog") or 0)

    # -- the transcript -----------------------------------------------------------------------

    def _insert(self, role: str, content: str, **fields: Any) -> int:
        # Model and tool text may carry NUL (a process printing '\0'), which PostgreSQL's text
        # cannot hold: it is written as U+FFFD on both backends, so such a turn commits like
        # any other instead of failing its write.
        content = content.replace("\x00", "\ufffd")
        seq = int(self.row["last_message_seq"]) + 1
        params: dict[str, Any] = {
            "conversation_id": self.conversation_id,
            "seq": seq,
            "message_id": new_id("msg"),
            "run_id": None,
            "role": role,
            "content": content,
            "tool_calls": None,
            "tool_call_id": None,
            "tool_name": None,
            "origin": None,
            "input_id": None,
            "meta": "{}",
            "now_us": self.now_us,
        }
        params.update(fields)

        def refused() -> Exception:
            open_calls = [r["call_id"] for r in self.open_tool_calls()]
            return PairingViolationError(
                self.conversation_id,
                f"a {role} message cannot follow tool calls {open_calls} before their results",
            )

        self.tx.run_later("insert_message", expect=1, mismatch=refused, **params)
        self.row["last_message_seq"] = seq
        # The feed's record of it: only the position; every read fills in the message (B1).
        self.record_event(MESSAGE_COMMITTED, {"message_seq": seq}, params["run_id"])
        self.appended.append(message_from_row(params | {"created_at_us": self.now_us}))
        return seq

    def append_user(
        self,
        content: str,
        *,
        origin: Origin | None = None,
        input_id: str | None = None,
        run_id: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> int:
        """A user-role message: a person's or agent's words, or an internal notice."""
        return self._insert(
            "user", content, origin=None if origin is None else origin.value,
            input_id=input_id, run_id=run_id, meta=_json(meta or {}),
        )

    def append_assistant(
        self,
        content: str,
        *,
        tool_calls: Sequence[ToolCall] = (),
        run_id: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> int:
        """An assistant message; its tool calls stay open until each has its result."""
        ids = [c.call_id for c in tool_calls]
        if len(set(ids)) != len(ids):
            raise PairingViolationError(self.conversation_id, f"duplicate tool call ids {ids}")
        calls = [
            {"call_id": c.call_id, "name": c.name, "arguments": dict(c.arguments)}
            for c in tool_calls
        ]
        seq = self._insert(
            "assistant", content, run_id=run_id, meta=_json(meta or {}),
            tool_calls=_json(calls) if calls else None,
        )
        for call in tool_calls:
            self.tx.run_later(
                "insert_tool_call", conversation_id=self.conversation_id, call_seq=seq,
                call_id=call.call_id, name=call.name, run_id=run_id,
            )
        return seq

    def append_tool_result(
        self,
        call_id: str,
        content: str,
        *,
        tool_name: str,
        run_id: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> int:
        """The result of an open tool call; refused for an unknown or answered call."""
        seq = int(self.row["last_message_seq"]) + 1
        self.tx.run_later(
            "answer_tool_call", conversation_id=self.conversation_id, call_id=call_id, seq=seq,
            expect=1,
            mismatch=lambda: PairingViolationError(
                self.conversation_id, f"no open tool call {call_id!r} to answer"
            ),
        )
        return self._insert(
            "tool", content, tool_call_id=call_id, tool_name=tool_name, run_id=run_id,
            meta=_json(meta or {}),
        )

    def open_tool_calls(self) -> list[Row]:
        return self.tx.all("open_tool_calls", conversation_id=self.conversation_id)

    def history(self, limit: int) -> list[Message]:
        """The newest ``limit`` messages after the last compaction, oldest first."""
        rows = self.tx.all(
            "history",
            conversation_id=self.conversation_id,
            after_seq=self.row["history_start_seq"],
            limit=limit,
        )
        return [message_from_row(r) for r in reversed(rows)]

    def start_history_at(self, seq: int) -> None:
        """Compaction: the history window starts after message ``seq`` from now on."""
        self.row["history_start_seq"] = seq

