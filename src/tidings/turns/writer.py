"""A turn's writes: each one a unit fenced by the slot token, and what became durable once it
committed (S7).

:class:`TurnWriter` is the one way a turn -- its loop, its obligations, its end -- writes: a
turn that lost its slot writes nothing, and the inputs read so far are written with the first
unit that commits after they were read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from tidings.clock import Clock
from tidings.mail import queue
from tidings.records.transcript import ConversationTx
from tidings.store import Store, Tx
from tidings.turns.history import HistoryCache
from tidings.turns.plan import TurnPlan, TurnProgress
from tidings.types import Message

T = TypeVar("T")


class TurnWriter:
    """Commits a turn's units and keeps the history cache and the progress in step."""

    def __init__(self, store: Store, clock: Clock, history: HistoryCache) -> None:
        self.store = store
        self.clock = clock
        self.history = history

    async def commit(
        self, plan: TurnPlan, progress: TurnProgress, write: Callable[[ConversationTx], T],
        *, ahead: Callable[[Tx], None] | None = None,
    ) -> T:
        """Run ``write`` fenced by the slot; once durable, the pending inputs are written.
        ``ahead`` says, before the lock, what ``write`` reads first (:meth:`Tx.read_ahead`)."""

        def unit(tx: Tx) -> tuple[T, list[Message]]:
            cx = ConversationTx.lock(tx, plan.conversation_id, self.clock, ahead=ahead)
            cx.slot.require(plan.slot_token)
            result = write(cx)
            cx.save()
            return result, cx.appended

        submitted = self.store.submit(unit, route=plan.conversation_id)
        try:
            result, appended = await asyncio.shield(submitted)
        except asyncio.CancelledError:
            # A stop cannot recall a submitted unit: learn whether it committed, so that the
            # stopped turn's own commit builds on what is durable, then stop.
            try:
                _, appended = await submitted
            except Exception:
                pass  # it did not commit
            else:
                self._committed(plan, progress, appended)
            raise
        self._committed(plan, progress, appended)
        return result

    def _committed(self, plan: TurnPlan, progress: TurnProgress, appended: list[Message]) -> None:
        self.history.extend(
            plan.conversation_id, start_seq=plan.history_start_seq, messages=appended
        )
        progress.pending = []
        if progress.draft is not None and any(m.role == "assistant" for m in appended):
            progress.draft = None  # the step's answer is committed: the draft is done
        progress.trim_recorded = progress.trim_recorded or progress.trimmed is not None
        progress.notice_written = progress.notice_written or plan.notice is not None

    def materialize_pending(
        self, cx: ConversationTx, plan: TurnPlan, progress: TurnProgress
    ) -> None:
        """Write the inputs read so far, and the turn's own notice, once."""
        # A unit may run more than once before it commits: it reads progress and leaves it
        # alone; :meth:`commit` records what became durable once it is.
        for item in progress.pending:
            queue.materialize(cx, item, plan.run_id)
        if progress.trimmed is not None and not progress.trim_recorded:
            cx.record_event("context_trimmed",
                            {"run_public_id": plan.run_id, **progress.trimmed}, plan.run_id)
        if plan.notice is not None and not progress.notice_written:
            cx.append_user(plan.notice, run_id=plan.run_id, meta=dict(plan.notice_meta))


__all__ = ("TurnWriter",)
