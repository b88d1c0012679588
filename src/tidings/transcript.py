"""A conversation locked inside a unit of work: the one writer of its inputs, messages and events.

Every unit that changes a conversation starts with :meth:`ConversationTx.lock` and ends with
:meth:`ConversationTx.save`. The lock (the conversation row: ``FOR UPDATE`` on PostgreSQL, the
single writer on SQLite) serialises all writers of one conversation, so arrival numbers,
message positions and event sequences are gap-free and commit ordered: a reader that resumes
"after sequence N" never misses a row that commits later with a smaller number.

Strict pairing is enforced by the store, not by good manners: while a tool call is open, the
``insert_message`` query refuses anything but its result, and this class raises
:class:`~tidings.errors.PairingViolationError` so the whole unit rolls back.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from tidings.clock import Clock
from tidings.errors import PairingViolationError, SlotLostError, UnknownConversationError
from tidings.models.base import ToolCall
from tidings.policy import read_order
from tidings.records import (
    conversation_from_row,
    encode_profile,
    input_from_row,
    message_from_row,
)
from tidings.store import Row, Tx
from tidings.types import (
    Author,
    Conversation,
    ConversationId,
    DeliveryMode,
    Input,
    InputId,
    InputState,
    Message,
    Origin,
    RunId,
    new_id,
)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class ConversationTx:
    """One conversation, locked for the rest of a unit of work. Call :meth:`save` last."""

    def __init__(self, tx: Tx, row: Row, clock: Clock) -> None:
        self.tx = tx
        self.row = dict(row)
        self.clock = clock
        self.now_us = clock.now_us()
        self.conversation = conversation_from_row(row)
        self._saved = (dict(row), self.conversation)
        self._events: list[dict[str, Any]] = []
        self.appended: list[Message] = []
        self._added: list[Input] = []
        self.notified = False
        """Whether this unit delivered a task notification (it then waits unconsumed)."""
        self.changed_tasks: dict[str, Any] = {}
        """The task journal's records this unit wrote, newest per task id: when no
        notification waited undelivered as the unit began, only these can be due now."""

    @classmethod
    def lock(cls, tx: Tx, conversation_id: str, clock: Clock) -> ConversationTx:
        row = tx.one("lock_conversation", conversation_id=conversation_id)
        if row is None:
            raise UnknownConversationError(conversation_id)
        return cls(tx, row, clock)

    @property
    def conversation_id(self) -> ConversationId:
        return self.conversation.conversation_id

    # -- the conversation's own state ---------------------------------------------------------

    def update(self, **changes: Any) -> Conversation:
        """Change fields of the conversation (written by :meth:`save`)."""
        self.conversation = replace(self.conversation, **changes)
        return self.conversation

    def slot_holder(self) -> tuple[str | None, int | None, str | None]:
        """The slot's token, deadline and run (None when free)."""
        return self.row["slot_token"], self.row["slot_deadline_us"], self.row["slot_run"]

    def slot_free(self) -> bool:
        token, deadline, _ = self.slot_holder()
        return token is None or deadline is None or deadline <= self.now_us

    def take_slot(self, token: str, deadline_us: int, instance_id: str, run_id: str) -> None:
        self.row.update(
            slot_token=token, slot_deadline_us=deadline_us, slot_instance=instance_id,
            slot_run=run_id,
        )

    def require_slot(self, token: str) -> None:
        """Fence: the caller's writes go through only while it holds the unexpired slot."""
        held, deadline, _ = self.slot_holder()
        if held != token or deadline is None or deadline <= self.now_us:
            raise SlotLostError(self.conversation_id)

    def release_slot(self, token: str) -> None:
        if self.row["slot_token"] == token:
            self.row.update(
                slot_token=None, slot_deadline_us=None, slot_instance=None, slot_run=None
            )

    def save(self) -> None:
        """Write the unit's events and the conversation's state and counters."""
        if self._events:
            self.tx.run_later(
                "insert_events", conversation_id=self.conversation_id,
                items=_json(self._events), now_us=self.now_us,
            )
            self._events = []
        if (self.row, self.conversation) == self._saved:
            return  # nothing changed: no write
        self._saved = (dict(self.row), self.conversation)
        c = self.conversation
        r = self.row
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
            queued_inputs=r["queued_inputs"],
            last_queue_position=r["last_queue_position"],
            last_message_seq=r["last_message_seq"],
            last_event_seq=r["last_event_seq"],
            history_start_seq=r["history_start_seq"],
            slot_token=r["slot_token"],
            slot_deadline_us=r["slot_deadline_us"],
            slot_instance=r["slot_instance"],
            slot_run=r["slot_run"],
            now_us=self.now_us,
        )

    # -- the journal --------------------------------------------------------------------------

    def record_event(self, type: str, data: dict[str, Any], run_id: str | None = None) -> int:
        """Journal an event; the unit's events are written together by :meth:`save`."""
        seq = int(self.row["last_event_seq"]) + 1
        self.row["last_event_seq"] = seq
        self._events.append({"seq": seq, "type": type, "run_id": run_id, "data": _json(data)})
        return seq

    # -- the door -----------------------------------------------------------------------------

    def add_input(
        self,
        *,
        content: str,
        origin: Origin,
        authored_by: Author,
        delivery_mode: DeliveryMode,
        sender_conversation_id: str | None = None,
        run_public_id: str | None = None,
        task_key: str | None = None,
        meta: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> Input:
        """Write one input at the next arrival number and journal ``input_accepted``."""
        position = int(self.row["last_queue_position"]) + 1
        self.row["last_queue_position"] = position
        self.row["queued_inputs"] = int(self.row["queued_inputs"]) + 1
        accepted = Input(
            input_id=InputId(new_id("in")),
            conversation_id=self.conversation_id,
            queue_position=position,
            origin=origin,
            authored_by=authored_by,
            sender_conversation_id=(
                None if sender_conversation_id is None
                else ConversationId(sender_conversation_id)
            ),
            run_public_id=None if run_public_id is None else RunId(run_public_id),
            task_key=task_key,
            delivery_mode=delivery_mode,
            content=content,
            meta=dict(meta or {}),
            state=InputState.QUEUED,
            run_id=None,
            accepted_at_us=self.now_us,
        )
        self.tx.run_later(
            "insert_input",
            input_id=accepted.input_id,
            conversation_id=self.conversation_id,
            queue_position=position,
            origin=origin.value,
            kernel=int(origin.is_kernel),
            author_kind=authored_by.kind.value,
            author_handle=authored_by.handle,
            author_display_name=authored_by.display_name,
            sender_conversation_id=sender_conversation_id,
            run_public_id=run_public_id,
            task_key=task_key,
            delivery_mode=delivery_mode.value,
            content=content,
            meta=_json(accepted.meta),
            idempotency_key=idempotency_key,
            now_us=self.now_us,
        )
        self._added.append(accepted)
        self.record_event("input_accepted", input_accepted_data(accepted))
        return accepted

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

    def in_flight(self) -> tuple[str | None, frozenset[str]]:
        """The run holding the slot, and the queued inputs it took when it started (they stay
        queued until it materializes them at its first commit)."""
        _, _, running = self.slot_holder()
        if running is None:
            return None, frozenset()
        start = self.tx.one("last_turn_status", conversation_id=self.conversation_id,
                            run_id=running)
        taken = json.loads(start["data"]).get("inputs", []) if start is not None else []
        return str(running), frozenset(str(i) for i in taken)

    def cancel_supplementary(self, run_public_id: str) -> list[str]:
        """Cancel the kernel inputs a source run is owed that are still queued here (M14) --
        not those the running turn took already (it is the caller's to stop). Returns them."""
        queued = [str(r["input_id"]) for r in self.tx.all(
            "queued_kernel_inputs_of_run", conversation_id=self.conversation_id,
            run_public_id=run_public_id,
        )]
        if not queued:
            return []
        _, taken = self.in_flight()
        cancelled = [i for i in queued if i not in taken and self.tx.one(
            "cancel_queued_input", conversation_id=self.conversation_id, input_id=i
        ) is not None]
        if cancelled:
            self.row["queued_inputs"] = int(self.row["queued_inputs"]) - len(cancelled)
            self.record_event("input_cancelled",
                              {"input_ids": cancelled, "run_public_id": run_public_id})
        return cancelled

    def cancel_queued(self, input_id: str) -> bool:
        """Withdraw one input still queued here (a request its sender cancelled before it
        was read). False when it was read already, or was never queued here."""
        if self.tx.one("cancel_queued_input", conversation_id=self.conversation_id,
                       input_id=input_id) is None:
            return False
        self.row["queued_inputs"] = int(self.row["queued_inputs"]) - 1
        self.record_event("input_cancelled", {"input_ids": [input_id]})
        return True

    def queued_inputs(self, limit: int) -> list[Input]:
        """Queued inputs in read order (kernel first, then arrival)."""
        if self.queued_count == 0:
            return []
        if self.queued_count == len(self._added) <= limit:
            # Every queued input was added by this unit (a post that starts its own turn).
            return read_order(self._added)
        rows = self.tx.all("queued_inputs", conversation_id=self.conversation_id, limit=limit)
        return [input_from_row(r) for r in rows]

    def queued_steers(self, limit: int) -> list[Input]:
        if self.queued_count == 0:
            return []
        rows = self.tx.all("queued_steers", conversation_id=self.conversation_id, limit=limit)
        return [input_from_row(r) for r in rows]

    def materialize(self, item: Input, run_id: str) -> int:
        """Turn a queued input into the transcript's user message, read by ``run_id``."""
        seq = int(self.row["last_message_seq"]) + 1
        self.tx.run_later(
            "materialize_input", input_id=item.input_id, run_id=run_id, now_us=self.now_us,
            message_seq=seq, expect=1,
            mismatch=lambda: PairingViolationError(
                self.conversation_id, f"input {item.input_id} is no longer queued"
            ),
        )
        self.row["queued_inputs"] = int(self.row["queued_inputs"]) - 1
        self._added = [i for i in self._added if i.input_id != item.input_id]
        appended = self.append_user(
            item.content,
            origin=item.origin,
            input_id=item.input_id,
            run_id=run_id,
            meta={
                "authored_by": {
                    "kind": item.authored_by.kind.value,
                    "handle": item.authored_by.handle,
                    "display_name": item.authored_by.display_name,
                },
                **({"sender_conversation_id": item.sender_conversation_id}
                   if item.sender_conversation_id else {}),
                **({"task_key": item.task_key} if item.task_key else {}),
                **item.meta,
            },
        )
        assert appended == seq
        self.record_event(
            "input_materialized",
            {"input_id": item.input_id, "run_public_id": run_id, "message_seq": seq,
             "origin": item.origin.value, "delivery_mode": item.delivery_mode.value},
            run_id,
        )
        return seq

    # -- the transcript -----------------------------------------------------------------------

    def _insert(self, role: str, content: str, **fields: Any) -> int:
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


def input_accepted_data(item: Input) -> dict[str, Any]:
    """The ``input_accepted`` event: origin, authored_by and the stamps (M15)."""
    data: dict[str, Any] = {
        "input_id": item.input_id,
        "origin": item.origin.value,
        "authored_by": {
            "kind": item.authored_by.kind.value,
            "handle": item.authored_by.handle,
            "display_name": item.authored_by.display_name,
        },
        "queue_position": item.queue_position,
        "delivery_mode": item.delivery_mode.value,
    }
    if item.sender_conversation_id is not None:
        data["sender_conversation_public_id"] = item.sender_conversation_id
    if item.run_public_id is not None:
        data["run_public_id"] = item.run_public_id
    if item.task_key is not None:
        data["task_key"] = item.task_key
    return data
