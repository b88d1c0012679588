"""The relay of child replies to their parents (M16, M17).

:class:`ChildRelay` opens a parent's requests in its children (what a request is, and each
transition of it in a unit -- answered, cancelled, withdrawn, consumed in a run -- is
:mod:`tidings.mail.child_requests`). Once the child's turn answered a request, the relay gives
the reply to the parent as kernel mail (origin ``child``, text ``<task_result task=… status=…
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
from typing import Any

from tidings.clock import Clock
from tidings.errors import InputQueueFullError, InvalidInputError, UnknownConversationError
from tidings.mail.child_requests import (
    CHILD_REQUEST,
    CHILD_TASK_PREFIX,
    ChildRequest,
    request_from_row,
)
from tidings.mail.door import Door, kernel_author
from tidings.records.transcript import ConversationTx
from tidings.store import Store
from tidings.support.policy import frozen_environment
from tidings.types import (
    Author,
    AuthorKind,
    ConversationId,
    ConversationStatus,
    Origin,
    Profile,
    StartKind,
    new_id,
)

log = logging.getLogger("tidings.relay")

REPLY_POLL_S = 0.25
"""How often a wait on a reply re-reads, for a reply committed by another process."""

RELAYS_PER_UNIT = 64
"""A parent's replies relayed in one unit, at most (its mail turn batches up to 16 of them)."""

StartWith = Callable[[str, StartKind, Callable[[ConversationTx], Any]], Awaitable[Any]]
"""Runs a write on the locked conversation in the unit that starts its turn for the kind."""


def worker_final(request: ChildRequest, parent_owner: str) -> dict[str, str] | None:
    """A spawned child's first report is an independent worker final (M8, M9): its frozen
    requester, the memory context it answers into, and the exact result pointer. A later
    send's reply is ordinary child mail."""
    if request.kind != "spawn":
        return None
    return {"requester": parent_owner, "memory_context": request.parent_conversation_id,
            "callback_result": request.request_id}


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


__all__ = ("ChildRelay", "render", "worker_final")
