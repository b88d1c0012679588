"""A conversation's input queue (M2, M3, M14), read and changed inside a unit that holds the
conversation (:class:`~tidings.records.transcript.ConversationTx`).

The door (:mod:`tidings.mail.door`) writes an input into the queue; everything after that is
here: reading the queue in read order, knowing which queued inputs the running turn took,
withdrawing inputs nobody read yet, and materializing an input into the transcript.

Invariants, all kept under the conversation lock:

- The conversation row's ``queued_inputs`` counter equals the number of its inputs in state
  ``queued``: every function that takes an input out of the queue decrements it in the same
  unit (materialized or cancelled, never both -- each transition matches only a queued row).
- An input is read at most once: :func:`materialize` refuses one that is no longer queued,
  raising :class:`~tidings.errors.PairingViolationError` so the whole unit rolls back.
- The inputs a running turn took when it started stay queued until it materializes them at
  its first commit (:func:`in_flight` names them); a cancellation leaves them to the caller,
  who stops the turn instead.
"""

from __future__ import annotations

import json

from tidings.errors import PairingViolationError
from tidings.records.rows import input_from_row
from tidings.records.transcript import ConversationTx
from tidings.store import Tx
from tidings.support.policy import read_order
from tidings.types import Input


def queued_inputs(cx: ConversationTx, limit: int) -> list[Input]:
    """Queued inputs in read order (kernel first, then arrival)."""
    if cx.queued_count == 0:
        return []
    if cx.queued_count == len(cx.accepted) <= limit:
        # Every queued input was added by this unit (a post that starts its own turn).
        return read_order(cx.accepted)
    rows = cx.tx.all("queued_inputs", conversation_id=cx.conversation_id, limit=limit)
    return [input_from_row(r) for r in rows]


def queued_steers(cx: ConversationTx, limit: int) -> list[Input]:
    """Queued inputs of delivery mode ``steer``, in arrival order."""
    if cx.queued_count == 0:
        return []
    rows = cx.tx.all("queued_steers", conversation_id=cx.conversation_id, limit=limit)
    return [input_from_row(r) for r in rows]


def in_flight(cx: ConversationTx) -> tuple[str | None, frozenset[str]]:
    """The run holding the slot, and the queued inputs it took when it started (they stay
    queued until it materializes them at its first commit)."""
    _, _, running = cx.slot.holder()
    if running is None:
        return None, frozenset()
    return str(running), taken_by(cx.tx, cx.conversation_id, str(running))


def taken_by(tx: Tx, conversation_id: str, run_id: str) -> frozenset[str]:
    """The inputs ``run_id`` took when it started, as its newest ``turn_status`` names them
    (its start, until it holds for approval or ends: empty then). Those still queued are in
    flight: the run materializes them at its first commit."""
    start = tx.one("last_turn_status", conversation_id=conversation_id, run_id=run_id)
    taken = json.loads(start["data"]).get("inputs", []) if start is not None else []
    return frozenset(str(i) for i in taken)


def cancel_supplementary(cx: ConversationTx, run_public_id: str) -> list[str]:
    """Cancel the kernel inputs a source run is owed that are still queued here (M14) --
    not those the running turn took already (it is the caller's to stop). Returns them."""
    queued = [str(r["input_id"]) for r in cx.tx.all(
        "queued_kernel_inputs_of_run", conversation_id=cx.conversation_id,
        run_public_id=run_public_id,
    )]
    if not queued:
        return []
    _, taken = in_flight(cx)
    cancelled = [i for i in queued if i not in taken and cx.tx.one(
        "cancel_queued_input", conversation_id=cx.conversation_id, input_id=i
    ) is not None]
    if cancelled:
        cx.row["queued_inputs"] = int(cx.row["queued_inputs"]) - len(cancelled)
        cx.record_event("input_cancelled",
                        {"input_ids": cancelled, "run_public_id": run_public_id})
    return cancelled


def cancel_queued(cx: ConversationTx, input_id: str) -> bool:
    """Withdraw one input still queued here (a request its sender cancelled before it
    was read). False when it was read already, or was never queued here."""
    if cx.tx.one("cancel_queued_input", conversation_id=cx.conversation_id,
                 input_id=input_id) is None:
        return False
    cx.row["queued_inputs"] = int(cx.row["queued_inputs"]) - 1
    cx.record_event("input_cancelled", {"input_ids": [input_id]})
    return True


def materialize(cx: ConversationTx, item: Input, run_id: str) -> int:
    """Turn a queued input into the transcript's user message, read by ``run_id``; returns
    the message's position."""
    seq = int(cx.row["last_message_seq"]) + 1
    cx.tx.run_later(
        "materialize_input", input_id=item.input_id, run_id=run_id, now_us=cx.now_us,
        message_seq=seq, expect=1,
        mismatch=lambda: PairingViolationError(
            cx.conversation_id, f"input {item.input_id} is no longer queued"
        ),
    )
    cx.row["queued_inputs"] = int(cx.row["queued_inputs"]) - 1
    cx.accepted = [i for i in cx.accepted if i.input_id != item.input_id]
    appended = cx.append_user(
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
    cx.record_event(
        "input_materialized",
        {"input_id": item.input_id, "run_public_id": run_id, "message_seq": seq,
         "origin": item.origin.value, "delivery_mode": item.delivery_mode.value},
        run_id,
    )
    return seq
