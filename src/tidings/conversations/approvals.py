"""Approvals (L5): a tool call that needs a person's decision holds its run until one is made.

- The approval is requested in the unit that commits the tool call, so a call that needs one
  is never open without it.
- A decision is terminal: ``pending`` becomes ``approved``, ``denied`` or ``expired`` once, by a
  conditional update. Repeating the same decision is answered with the state as it is (a
  duplicate approval applies nothing twice); a contradicting one -- a denial after the approval
  was applied, an approval after a denial or an expiry -- is refused with
  :class:`ApprovalDecidedError`, and the outcome stands.
- Applying is fenced: ``approved`` becomes ``applied`` in a unit that also proves the turn still
  holds its conversation's slot -- the capacity it runs in is reserved before anything is
  applied -- and only the unit that made that transition runs the tool.
- Runtime signals are never approvals: a decision enters only through :meth:`Approvals.decide`,
  on behalf of a person who owns the conversation.

Waiting is a hint plus a poll: a decision in this process wakes its waiter at once, one made
by another instance is seen at the next poll.

While a call waits, its run reads as ``awaiting_approval`` (derived from the pending approval,
not stored: the run row stays ``running``, so stop, recovery and the end of the run treat it
as the live run it is). The feed says so: ``turn_status {status: awaiting_approval}`` when the
calls are committed, and ``turn_status {status: running}`` in the unit that decides (or
expires) the run's last pending approval.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from tidings.clock import Clock, to_us
from tidings.errors import ApprovalDecidedError, InvalidInputError, UnknownApprovalError
from tidings.records.rows import listed
from tidings.records.transcript import ConversationTx
from tidings.store import Row, Store, Tx
from tidings.support.metrics import Metrics
from tidings.types import ConversationId, new_id

STATUSES = ("pending", "approved", "denied", "expired", "applied")


@dataclass(frozen=True, slots=True)
class ApprovalConfig:
    """How long a request waits for a person, and how often a waiter looks."""

    ttl: timedelta = timedelta(hours=1)
    poll: timedelta = timedelta(milliseconds=250)


@dataclass(frozen=True, slots=True)
class Approval:
    """One request for a person's decision on one tool call."""

    approval_id: str
    conversation_id: ConversationId
    run_id: str
    call_id: str
    tool_name: str
    arguments: dict[str, Any]
    status: str
    decided_by: str | None
    requested_at_us: int
    expires_at_us: int
    decided_at_us: int | None
    applied_at_us: int | None


def approval_from_row(row: Row) -> Approval:
    return Approval(
        approval_id=row["approval_id"],
        conversation_id=ConversationId(row["conversation_id"]),
        run_id=row["run_id"],
        call_id=row["call_id"],
        tool_name=row["tool_name"],
        arguments=json.loads(row["arguments"]),
        status=row["status"],
        decided_by=row["decided_by"],
        requested_at_us=int(row["requested_at_us"]),
        expires_at_us=int(row["expires_at_us"]),
        decided_at_us=row["decided_at_us"],
        applied_at_us=row["applied_at_us"],
    )


def needs_approval(approval_mode: str, *, read_only: bool) -> bool:
    """Whether a profile's approval mode holds a call of this tool for a person (pure)."""
    return approval_mode == "always" or (approval_mode == "writes" and not read_only)


def expire_run_approvals(cx: ConversationTx, run_id: str) -> None:
    """The run is over (stopped, failed, interrupted by a crash): its pending approvals expire,
    so a late decision is refused rather than left pending forever."""
    cx.tx.run_later("expire_run_approvals", run_id=run_id, now_us=cx.now_us)


class Approvals:
    """Requests, decisions, waits and the fenced application of approvals."""

    def __init__(
        self, store: Store, clock: Clock, config: ApprovalConfig | None = None,
        *, metrics: Metrics | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.config = config or ApprovalConfig()
        self.metrics = metrics
        self._decided: dict[str, asyncio.Event] = {}
        self._holding: dict[str, str] = {}
        """Approval id -> conversation id, while a turn of this process waits on it."""
        self._hold_changed: asyncio.Event | None = None
        self._hold_waiters: dict[str, list[asyncio.Future[None]]] = {}
        """Conversation id -> the futures of :meth:`hold_begun` not done yet."""

    # -- in the turn's units ------------------------------------------------------------------

    @staticmethod
    def new_id() -> str:
        return new_id("appr")

    def request(
        self, cx: ConversationTx, approval_id: str, *, run_id: str, call_id: str,
        tool_name: str, arguments: Mapping[str, Any],
    ) -> None:
        """Record a pending approval for a call being committed in this unit."""
        cx.tx.run_later(
            "insert_approval", approval_id=approval_id, conversation_id=cx.conversation_id,
            run_id=run_id, call_id=call_id, tool_name=tool_name,
            arguments=json.dumps(dict(arguments), ensure_ascii=False)[:16_384],
            now_us=cx.now_us, expires_at_us=cx.now_us + to_us(self.config.ttl),
        )
        cx.record_event(
            "approval_requested",
            {"approval_id": approval_id, "run_public_id": run_id, "call_id": call_id,
             "tool_name": tool_name},
            run_id,
        )

    def apply(self, cx: ConversationTx, approval_id: str, run_id: str) -> bool:
        """The fence: ``approved`` -> ``applied``, once. The caller's unit holds the slot."""
        row = cx.tx.one("get_approval", approval_id=approval_id)
        if row is None or row["status"] != "approved":
            return False
        cx.tx.execute("apply_approval", approval_id=approval_id, now_us=cx.now_us)
        cx.record_event("approval_applied", {"approval_id": approval_id}, run_id)
        return True

    def expire_run(self, cx: ConversationTx, run_id: str) -> None:
        """The run ends (stopped, failed): what still waits for a person can never apply."""
        expire_run_approvals(cx, run_id)

    # -- waiting ------------------------------------------------------------------------------

    async def wait(self, approval_id: str) -> Approval:
        """Wait until the approval is decided or has expired; returns it as it then is."""
        event = self._decided.setdefault(approval_id, asyncio.Event())
        poll = to_us(self.config.poll) / 1e6
        held = False
        try:
            while True:
                approval = await self.get(approval_id)
                if approval.status != "pending":
                    return approval
                self._hold(approval_id, approval.conversation_id)
                if self.clock.now_us() >= approval.expires_at_us:
                    await self._expire(approval)
                    continue
                if not held and self.metrics is not None:
                    self.metrics.count("tidings_approval_waits_total",
                                       "Tool calls a run holds until a person decides.")
                held = True
                await self.clock.wait(event, poll)
                event.clear()
        finally:
            self._decided.pop(approval_id, None)
            self._release(approval_id)

    def holding(self, conversation_id: str) -> bool:
        """Whether a turn of this process holds on a pending approval of the conversation."""
        return conversation_id in self._holding.values()

    async def held(self, conversation_id: str) -> None:
        """Return once a turn of this process holds on a pending approval of the
        conversation (at once if one does): what runs there waits for a person now."""
        while not self.holding(conversation_id):
            if self._hold_changed is None:
                self._hold_changed = asyncio.Event()
            await self._hold_changed.wait()

    def hold_begun(self, conversation_id: str) -> asyncio.Future[None]:
        """A future done once a turn of this process holds on a pending approval of the
        conversation (done at once if one does), as :meth:`held` returns; the waiter that
        no longer wants it cancels it. A future, not a task: waiting for it beside another
        wait costs no task, and cancelling it ends it at once."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.holding(conversation_id):
            future.set_result(None)
            return future
        self._hold_waiters.setdefault(conversation_id, []).append(future)
        future.add_done_callback(lambda done: self._forget_waiter(conversation_id, done))
        return future

    def _forget_waiter(self, conversation_id: str, future: asyncio.Future[None]) -> None:
        waiters = self._hold_waiters.get(conversation_id)
        if waiters is not None and future in waiters:
            waiters.remove(future)
            if not waiters:
                del self._hold_waiters[conversation_id]

    def _hold(self, approval_id: str, conversation_id: str) -> None:
        if self._holding.get(approval_id) != conversation_id:
            self._holding[approval_id] = conversation_id
            for waiter in self._hold_waiters.pop(conversation_id, ()):
                if not waiter.done():
                    waiter.set_result(None)
            self._changed()

    def _release(self, approval_id: str) -> None:
        if self._holding.pop(approval_id, None) is not None:
            self._changed()

    def _changed(self) -> None:
        if self._hold_changed is not None:
            self._hold_changed.set()
            self._hold_changed = None

    async def _expire(self, approval: Approval) -> None:
        def unit(tx: Tx) -> None:
            cx = ConversationTx.lock(tx, approval.conversation_id, self.clock)
            if cx.tx.execute("expire_approval", approval_id=approval.approval_id,
                             now_us=cx.now_us):
                cx.record_event("approval_decided",
                                {"approval_id": approval.approval_id, "status": "expired"},
                                approval.run_id)
                _resumed(cx, approval.run_id, approval.approval_id)
            cx.save()

        await self.store.transact(unit, route=approval.conversation_id)

    # -- a person's decision ------------------------------------------------------------------

    async def decide(
        self, conversation_id: str, approval_id: str, *, approve: bool, decided_by: str,
        owner: str | None = None,
    ) -> Approval:
        """Approve or deny; see the module's rules. Unknown and foreign ids are the same."""
        if not decided_by or len(decided_by) > 200:
            raise InvalidInputError("decided_by names the person deciding (1-200 characters)")
        wanted = "approved" if approve else "denied"

        def unit(tx: Tx) -> Approval:
            cx = ConversationTx.lock(tx, conversation_id, self.clock)
            row = tx.one("get_approval", approval_id=approval_id)
            if row is None or row["conversation_id"] != conversation_id or (
                owner is not None and cx.conversation.owner != owner
            ):
                raise UnknownApprovalError(approval_id)
            current = approval_from_row(row)
            if current.status == "pending" and cx.now_us >= current.expires_at_us:
                tx.execute("expire_approval", approval_id=approval_id, now_us=cx.now_us)
                cx.record_event("approval_decided",
                                {"approval_id": approval_id, "status": "expired"},
                                current.run_id)
                _resumed(cx, current.run_id, approval_id)
                cx.save()
                return approval_from_row(tx.one("get_approval", approval_id=approval_id) or row)
            if current.status == "pending":
                tx.execute("decide_approval", approval_id=approval_id, status=wanted,
                           decided_by=decided_by, now_us=cx.now_us)
                cx.record_event("approval_decided",
                                {"approval_id": approval_id, "status": wanted,
                                 "decided_by": decided_by}, current.run_id)
                _resumed(cx, current.run_id, approval_id)
                cx.save()
                return approval_from_row(tx.one("get_approval", approval_id=approval_id) or row)
            return current

        decided = await self.store.transact(unit, route=conversation_id)
        if decided.status != "pending":
            # Not held any more from this commit on: a settle that follows the decision waits
            # for what the run does next, not for a person.
            self._release(approval_id)
        event = self._decided.get(approval_id)
        if event is not None:
            event.set()
        same = decided.status == wanted or (approve and decided.status == "applied")
        if not same:
            raise ApprovalDecidedError(approval_id, decided.status)
        return decided

    # -- reading ------------------------------------------------------------------------------

    async def get(self, approval_id: str) -> Approval:
        row = await self.store.read(lambda tx: tx.one("get_approval", approval_id=approval_id))
        if row is None:
            raise UnknownApprovalError(approval_id)
        return approval_from_row(row)

    async def list(
        self, conversation_id: str, *, status: str = "", limit: int = 100
    ) -> list[Approval]:
        rows = await listed(self.store, "conversation_approvals", conversation_id,
                            status=status, statuses=STATUSES, limit=limit)
        return [approval_from_row(r) for r in rows]


def _resumed(cx: ConversationTx, run_id: str, approval_id: str) -> None:
    """In the unit that took an approval out of ``pending``: when it was the live run's last
    pending one, the run is running again -- the feed says so, with the status reads."""
    row = cx.tx.one("get_run", run_id=run_id)
    if row is not None and row["status"] == "running" and not row["awaiting_approval"]:
        cx.record_event("turn_status",
                        {"run_public_id": run_id, "status": "running",
                         "approval_id": approval_id},
                        run_id)


__all__ = ("Approval", "ApprovalConfig", "Approvals", "needs_approval")
