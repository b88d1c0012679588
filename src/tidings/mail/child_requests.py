"""Child requests (M16, M17): what a parent opened in a child, and each transition of it made
in a unit on a locked conversation.

A parent's turn opens requests in a child conversation: ``spawn`` creates the child with a
brief, ``send`` asks it again (:class:`~tidings.mail.relay.ChildRelay` opens them). Each request
is the child's input, stamped with the opening run and call, and a row in ``child_requests`` --
written in the unit that admits the input, so an open request always has its input. Only those
requests are owed: a person's (or a third agent's) exchange inside the child has no row and is
never relayed.

The child's turn that read a request answers it in the unit that commits its reply (or its
failure) -- :func:`answer`: the request becomes ``replied`` with the text, once; the relay
(:mod:`tidings.mail.relay`) then gives it to the parent. A request is cancelled on the parent
(:func:`cancel_run`, :func:`cancel_request`) and withdrawn in the child (:func:`withdraw`) by
the stop's cascade (:mod:`tidings.mail.stop`); a turn-owned request's reply is consumed in the
run that owns it (:func:`consume_in_run`), not relayed as mail.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tidings.mail import queue
from tidings.mail.batching import combined_sources, receipt_of
from tidings.records.rows import input_from_row
from tidings.records.transcript import ConversationTx
from tidings.store import Row
from tidings.types import ConversationId, Input, Origin

CHILD_REQUEST = "child_request"
"""The meta key of a child's input that carries an owed request (the kernel's own)."""

REPLY_LIMIT_CHARS = 32 * 1024

CHILD_TASK_PREFIX = "child-"
"""A child request's task key starts so (a background task's with ``bg-``)."""


@dataclass(frozen=True, slots=True)
class ChildRequest:
    """One request a parent opened in a child, and what became of it."""

    request_id: str
    parent_conversation_id: ConversationId
    child_conversation_id: ConversationId
    input_id: str
    run_public_id: str
    call_id: str
    task_key: str
    kind: str
    state: str
    reply_status: str | None
    reply: str | None
    relayed: bool
    environment: dict[str, Any]
    """The opening run's frozen environment (M5): the reply's mail turn runs on it."""
    owner_run: str | None = None
    """A turn-owned spawn: the run whose reply its first report settles in (M16)."""
    consumed_in_run: str | None = None
    """The run that consumed the reply in-run (a wait, a synthesis round), not as mail."""
    agent: str | None = None
    """A remote child (P5): the remote A2A agent answering it; None for a local child. Read
    with a parent's requests (``requests_of``), as are the two below."""
    remote_task_id: str | None = None
    """A remote child: the agent's task, once the brief was answered."""
    remote_state: str | None = None
    """A remote child: its task's A2A state as last seen (``unknown`` when it was lost)."""


def request_from_row(row: Row) -> ChildRequest:
    return ChildRequest(
        request_id=row["request_id"],
        parent_conversation_id=ConversationId(row["parent_conversation_id"]),
        child_conversation_id=ConversationId(row["child_conversation_id"]),
        input_id=row["input_id"],
        run_public_id=row["run_public_id"],
        call_id=row["call_id"],
        task_key=row["task_key"],
        kind=row["kind"],
        state=row["state"],
        reply_status=row["reply_status"],
        reply=row["reply"],
        relayed=row["relayed_at_us"] is not None,
        environment=json.loads(row["environment"]),
        owner_run=row["owner_run"],
        consumed_in_run=row["consumed_in_run"],
        agent=row.get("agent"),  # only the parent's list joins the remote children
        remote_task_id=row.get("remote_task_id"),
        remote_state=row.get("remote_state"),
    )


def answer(cx: ConversationTx, item: Input, *, status: str, text: str, run_id: str) -> bool:
    """In the unit that commits a child run's reply (or failure): answer the request the input
    carried, if it carried one. Returns whether it did (the caller kicks the relay)."""
    if item.origin is not Origin.AGENT or CHILD_REQUEST not in item.meta:
        return False  # not a request a parent opened here (the parent's own mail included)
    cx.tx.run_later(
        "reply_child_request", input_id=item.input_id, reply_status=status,
        reply=text[:REPLY_LIMIT_CHARS], reply_run_id=run_id, now_us=cx.now_us,
    )
    return True


@dataclass(frozen=True, slots=True)
class Cancelled:
    """A request whose reply is owed to no one any more, and where it was asked."""

    request_id: str
    child_conversation_id: ConversationId
    input_id: str
    task_key: str


def _cancelled(rows: list[Row]) -> list[Cancelled]:
    return [Cancelled(r["request_id"], ConversationId(r["child_conversation_id"]),
                      r["input_id"], r["task_key"]) for r in rows]


def cancel_run(cx: ConversationTx, run_public_id: str) -> list[Cancelled]:
    """In a unit on the parent: its children owe a stopped source run nothing more (M14).
    Returns the requests cancelled, for the caller to cascade into the children."""
    return _cancelled(cx.tx.all(
        "cancel_child_requests_of_run", parent_conversation_id=cx.conversation_id,
        run_public_id=run_public_id,
    ))


def cancel_request(cx: ConversationTx, task_key: str) -> list[Cancelled]:
    """In a unit on the parent: one request it opened is cancelled (nothing if its reply was
    relayed or consumed already, or it is no request of this parent)."""
    return _cancelled(cx.tx.all(
        "cancel_child_request", parent_conversation_id=cx.conversation_id, task_key=task_key,
    ))


def withdraw(cx: ConversationTx, cancelled: Cancelled) -> str | None:
    """In a unit on the child: a cancelled request not yet read is withdrawn from its queue;
    one already read -- or taken by the turn running now -- names the child run that read it
    (for the cascade to stop)."""
    row = cx.tx.one("get_input", input_id=cancelled.input_id)
    if row is None or row["state"] == "cancelled":
        return None
    if row["state"] == "materialized":
        return None if row["run_id"] is None else str(row["run_id"])
    running, taken = queue.in_flight(cx)
    if cancelled.input_id in taken:
        return running  # in flight: the turn that took it is stopped instead
    queue.cancel_queued(cx, cancelled.input_id)
    return None


def started_reply_to(cx: ConversationTx, source_run: str) -> str | None:
    """In a unit on a conversation whose source run is being stopped: the running turn that
    has read (or taken) that run's mail -- a started, undelivered supplementary reply, which
    the stop cancels (M14) -- unless it is a combined report of several worker finals, which
    the conversation owns once their results were read (M9). None when there is none."""
    running, taken = queue.in_flight(cx)
    if running is None:
        return None
    reading = [input_from_row(row) for i in sorted(taken)
               if (row := cx.tx.one("get_input", input_id=i)) is not None]
    reading += [input_from_row(row) for row in cx.tx.all(
        "inputs_of_run", conversation_id=cx.conversation_id, run_id=running)
                if row["input_id"] not in taken]
    mail = [i for i in reading if i.origin.is_kernel]
    if not any(i.run_public_id == source_run for i in mail):
        return None
    owner = cx.conversation.owner
    if combined_sources([receipt_of(i, owner=owner) for i in mail]).combined:
        return None
    return running


def consume_in_run(cx: ConversationTx, request_id: str, run_id: str) -> ChildRequest | None:
    """In a unit of the run that owns a turn-owned request: consume its reply there (M16) --
    once: never again in this run, never as mail. None when it was consumed already, or its
    reply has not come, or this run does not own it."""
    if not cx.tx.execute("consume_child_request_in_run", request_id=request_id, run_id=run_id,
                         now_us=cx.now_us):
        return None
    cx.tx.run_later("mark_consumed_in_run", request_id=request_id, run_id=run_id)
    row = cx.tx.one("child_request", request_id=request_id)
    assert row is not None
    request = request_from_row(row)
    cx.record_event(
        "task_status",
        {"task_key": request.task_key, "state": request.reply_status or "completed",
         "resolved_by": {"kind": "conversation", "public_id": request.child_conversation_id}},
        run_id,
    )
    return request


def owned_replies(cx: ConversationTx, run_id: str) -> list[str]:
    """The turn-owned requests of ``run_id`` whose replies arrived and are not consumed."""
    return [str(r["request_id"]) for r in cx.tx.all("owned_child_replies", run_id=run_id)]


__all__ = (
    "CHILD_REQUEST",
    "CHILD_TASK_PREFIX",
    "REPLY_LIMIT_CHARS",
    "Cancelled",
    "ChildRequest",
    "answer",
    "cancel_request",
    "cancel_run",
    "consume_in_run",
    "owned_replies",
    "request_from_row",
    "started_reply_to",
    "withdraw",
)
