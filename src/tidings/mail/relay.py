"""Child conversations and the relay of their replies (M16, M17).

A parent's turn opens requests in a child conversation: ``spawn`` creates the child with a
brief, ``send`` asks it again. Each request is the child's input, stamped with the opening run
and call, and a row in ``child_requests`` -- written in the unit that admits the input, so an
open request always has its input. Only those requests are owed: a person's (or a third
agent's) exchange inside the child has no row and is never relayed.

The child's turn that read a request answers it in the unit that commits its reply (or its
failure): the request becomes ``replied`` with the text, once. The relay then gives the reply
to the parent as kernel mail (origin ``child``, text ``<task_result task=… status=…
conversation=…>…</task_result>``) and sets the request's ``relayed_at`` -- both in one unit on
the parent, and the marker is a conditional update, so a reply is relayed exactly once however
the sweep and the kick race and wherever a crash falls. The sweep is level-triggered on
``relayed_at`` (every minute by default); the kick after a child's reply is only a latency
hint. A tombstoned parent owes nothing; a full parent queue is retried by the sweep.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import logging
import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tidings.clock import Clock
from tidings.errors import InputQueueFullError, InvalidInputError, UnknownConversationError
from tidings.mail import queue
from tidings.mail.batching import combined_sources, receipt_of
from tidings.mail.door import Door, kernel_author
from tidings.records.rows import input_from_row
from tidings.records.transcript import ConversationTx
from tidings.store import Row, Store
from tidings.support.policy import frozen_environment
from tidings.types import (
    Author,
    AuthorKind,
    ConversationId,
    ConversationStatus,
    Input,
    Origin,
    Profile,
    StartKind,
    new_id,
)

log = logging.getLogger("tidings.relay")

CHILD_REQUEST = "child_request"
"""The meta key of a child's input that carries an owed request (the kernel's own)."""

REPLY_LIMIT_CHARS = 32 * 1024

REPLY_POLL_S = 0.25
"""How often a wait on a reply re-reads, for a reply committed by another process."""

RELAYS_PER_UNIT = 64
"""A parent's replies relayed in one unit, at most (its mail turn batches up to 16 of them)."""

CHILD_TASK_PREFIX = "child-"
"""A child request's task key starts so (a background task's with ``bg-``)."""

StartWith = Callable[[str, StartKind, Callable[[ConversationTx], Any]], Awaitable[Any]]
"""Runs a write on the locked conversation in the unit that starts its turn for the kind."""


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


def worker_final(request: ChildRequest, parent_owner: str) -> dict[str, str] | None:
    """A spawned child's first report is an independent worker final (M8, M9): its frozen
    requester, the memory context it answers into, and the exact result pointer. A later
    send's reply is ordinary child mail."""
    if request.kind != "spawn":
        return None
    return {"requester": parent_owner, "memory_context": request.parent_conversation_id,
            "callback_result": request.request_id}


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


def render(request: ChildRequest) -> str:
    """The parent's mail text: the reply as data inside its ``task_result`` element."""
    body = html.escape(request.reply or "", quote=False)
    return (
        f'<task_result task="{html.escape(request.task_key)}" '
        f'status="{html.escape(request.reply_status or "completed")}" '
        f'conversation="{html.escape(request.child_conversation_id)}">{body}</task_result>'
    )


class ChildRelay:
    """Opens child requests for tools and relays the replies to their parents."""

    def __init__(
        self, store: Store, clock: Clock, door: Door, *, start_with: StartWith,
        create_child: Callable[[str, str], Awaitable[ConversationId]],
        profile_of: Callable[[str], Awaitable[Profile]],
    ) -> None:
        self.store = store
        self.clock = clock
        self.door = door
        self._start_with = start_with
        self._create_child = create_child
        self._profile_of = profile_of
        self._kicked: asyncio.Task[int] | None = None
        self._again = False
        self._replied = asyncio.Event()

    # -- opening requests (from a parent's tool call) -----------------------------------------

    async def spawn(
        self, parent_id: str, run_id: str, call_id: str, brief: str, *, title: str = "",
        turn_owned: bool = False,
    ) -> ChildRequest:
        """Create a child conversation (the parent's owner, the parent's profile) and open the
        brief as its first request. A turn-owned spawn's first report settles in ``run_id``
        before its reply is final, not as mail (M16)."""
        child_id = await self._create_child(parent_id, title or brief[:80])
        return await self._open(parent_id, child_id, run_id, call_id, brief, kind="spawn",
                                owner_run=run_id if turn_owned else None)

    async def send(
        self, parent_id: str, child_id: str, run_id: str, call_id: str, message: str
    ) -> ChildRequest:
        """Open another request in a child this parent spawned (and only there)."""
        row = await self.store.read(lambda tx: tx.one(
            "child_link", parent_conversation_id=parent_id, child_conversation_id=child_id
        ))
        if row is None:
            raise UnknownConversationError(child_id)
        return await self._open(parent_id, child_id, run_id, call_id, message, kind="send")

    async def _open(
        self, parent_id: str, child_id: str, run_id: str, call_id: str, text: str, *, kind: str,
        owner_run: str | None = None,
    ) -> ChildRequest:
        environment = json.dumps(frozen_environment(await self._profile_of(parent_id)))
        request_id = new_id("creq")
        task_key = f"{CHILD_TASK_PREFIX}{secrets.token_hex(4)}"
        admission = self.door.prepare(
            child_id, text, origin=Origin.AGENT,
            authored_by=Author(AuthorKind.AGENT, f"conversation:{parent_id}", "parent agent"),
            sender_conversation_id=parent_id, run_public_id=run_id, task_key=task_key,
            kernel_meta={CHILD_REQUEST: request_id},
        )

        def write(cx: ConversationTx) -> ChildRequest:
            item = self.door.admit(cx, admission)
            cx.tx.run_later(
                "insert_child_request", request_id=request_id, parent_conversation_id=parent_id,
                child_conversation_id=child_id, input_id=item.input_id, run_public_id=run_id,
                call_id=call_id, task_key=task_key, kind=kind, environment=environment,
                now_us=cx.now_us,
            )
            if owner_run is not None:
                cx.tx.run_later("insert_turn_owned_request", request_id=request_id,
                                owner_run=owner_run)
            return ChildRequest(
                request_id, ConversationId(parent_id), ConversationId(child_id), item.input_id,
                run_id, call_id, task_key, kind, "open", None, None, False,
                json.loads(environment), owner_run,
            )

        result: ChildRequest = await self._start_with(child_id, StartKind.AGENT, write)
        return result

    # -- the relay ------------------------------------------------------------------------------

    def kick(self) -> None:
        """A latency hint after a child's reply committed: relay now rather than at the sweep.

        Kicks coalesce: one pass runs at a time, and a kick during a pass makes it go round
        once more, so a reply committed after the pass read its rows is not left to the sweep.
        """
        self._replied.set()  # wake the waits on a reply (they re-read; another process polls)
        self._replied = asyncio.Event()
        self._again = True
        if self._kicked is None or self._kicked.done():
            self._kicked = asyncio.get_running_loop().create_task(self._kicked_passes())

    async def await_replies(self, request_ids: Sequence[str], within: float) -> bool:
        """Wait, at most ``within`` seconds, until every request has its reply (or was
        cancelled). Wakes on a reply committed here; polls for one committed elsewhere."""
        deadline_us = self.clock.now_us() + round(within * 1e6)
        while True:
            rows = await self.store.read(lambda tx: [
                tx.one("child_request", request_id=r) for r in request_ids
            ])
            if all(row is None or row["state"] != "open" for row in rows):
                return True
            left = (deadline_us - self.clock.now_us()) / 1e6
            if left <= 0:
                return False
            await self.clock.wait(self._replied, min(left, REPLY_POLL_S))

    async def reply_of(self, request_id: str) -> ChildRequest | None:
        row = await self.store.read(lambda tx: tx.one("child_request", request_id=request_id))
        return None if row is None else request_from_row(row)

    async def _kicked_passes(self) -> int:
        relayed = 0
        while self._again:
            self._again = False
            relayed += await self.relay_pending()
        return relayed

    async def relay_pending(self, *, limit: int = 200) -> int:
        """Relay every replied, unrelayed request (the sweep, and the kick). Returns how many
        this call relayed. A parent's replies are relayed together, in one unit that also
        starts its mail turn -- one commit for many replies, and one batch for the turn."""
        rows = await self.store.read(
            lambda tx: tx.all("unrelayed_child_requests", limit=limit)
        )
        by_parent: dict[str, list[ChildRequest]] = {}
        for row in rows:
            request = request_from_row(row)
            by_parent.setdefault(request.parent_conversation_id, []).append(request)
        relayed = 0
        for parent_id, requests in by_parent.items():
            for start in range(0, len(requests), RELAYS_PER_UNIT):
                try:
                    relayed += await self._relay(
                        parent_id, requests[start:start + RELAYS_PER_UNIT]
                    )
                except InputQueueFullError:
                    log.info("the parent %s is full; the sweep retries", parent_id)
                    break
                except Exception:
                    log.exception("could not relay the child replies of %s", parent_id)
                    break
        return relayed

    async def _relay(self, parent_id: str, requests: list[ChildRequest]) -> int:
        def write(cx: ConversationTx) -> int:
            tombstoned = cx.conversation.status is ConversationStatus.TOMBSTONED
            room = len(requests) if tombstoned else self.door.room(cx)
            if room < len(requests):
                # A full queue: what is left stays unrelayed, for the sweep (M16).
                log.info("the parent %s is full; the sweep retries", parent_id)
            taking = requests[:room]
            if not taking:
                return 0
            marked = {str(r["request_id"]) for r in cx.tx.all(
                "mark_children_relayed", request_ids=[r.request_id for r in taking],
                now_us=cx.now_us,
            )}  # relayed already (the sweep and a kick raced): nothing twice
            if tombstoned:
                return 0  # a tombstoned parent owes nothing
            done = 0
            for request in taking:
                if request.request_id not in marked:
                    continue
                self.door.deliver(
                    cx, render(request), origin=Origin.CHILD,
                    authored_by=kernel_author(cx),
                    sender_conversation_id=request.child_conversation_id,
                    run_public_id=request.run_public_id, task_key=request.task_key,
                    meta={"relayed_request": request.request_id,
                          "status": request.reply_status or "completed",
                          "environment": request.environment,
                          **({"worker_final": final} if (final := worker_final(
                              request, cx.conversation.owner)) is not None else {})},
                )
                cx.record_event(
                    "task_status",
                    {"task_key": request.task_key,
                     "state": request.reply_status or "completed",
                     "resolved_by": {"kind": "conversation",
                                     "public_id": request.child_conversation_id}},
                    request.run_public_id,
                )
                done += 1
            return done

        try:
            relayed: int = await self._start_with(parent_id, StartKind.MAIL, write)
        except UnknownConversationError:
            return 0
        return relayed

    async def close(self) -> None:
        if self._kicked is not None:
            self._kicked.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._kicked

    # -- reading --------------------------------------------------------------------------------

    async def requests_of(self, parent_id: str, *, limit: int = 100) -> list[ChildRequest]:
        if not 1 <= limit <= 1_000:
            raise InvalidInputError("limit must be between 1 and 1000")
        rows = await self.store.read(lambda tx: tx.all(
            "child_requests_of_parent", parent_conversation_id=parent_id, limit=limit
        ))
        return [request_from_row(r) for r in rows]


__all__ = (
    "CHILD_REQUEST",
    "CHILD_TASK_PREFIX",
    "Cancelled",
    "ChildRelay",
    "ChildRequest",
    "answer",
    "cancel_request",
    "cancel_run",
    "consume_in_run",
    "owned_replies",
    "render",
    "started_reply_to",
    "withdraw",
    "worker_final",
)
