"""The units that begin a turn, as this process runs them, and the keeper of a turn's slot.

Taking the slot is one unit of work under the conversation's lock, written in :mod:`.slot`
(``slot.begin``): :class:`Starter` binds it to this process's outbox, door, instance and turn
settings, alone or beside a write of the caller's (a person's post and the start of the turn
it asks for, one commit). The coordinator submits these units and runs the turns they plan;
while a turn runs, its :class:`Keeper` extends the slot.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from tidings.clock import Clock
from tidings.mail.door import Door
from tidings.records.instances import Instance
from tidings.records.outbox import Outbox
from tidings.records.transcript import ConversationTx
from tidings.scheduler import slot
from tidings.scheduler.entries import Entry
from tidings.scheduler.slot import Begin
from tidings.store import Store, Tx
from tidings.tasks import journal
from tidings.turns.runner import TurnConfig, TurnPlan, TurnRunner
from tidings.types import StartKind

T = TypeVar("T")


class Starter:
    """The slot's units on a locked conversation, bound to this process."""

    def __init__(
        self, store: Store, outbox: Outbox, runner: TurnRunner, clock: Clock, *,
        door: Door, instance: Instance,
    ) -> None:
        self.store = store
        self.outbox = outbox
        self.runner = runner
        self.clock = clock
        self.door = door
        """The door the slot-taking unit delivers due task notifications through."""
        self.instance = instance

    @property
    def config(self) -> TurnConfig:
        return self.runner.config

    def begin_locked(
        self, cx: ConversationTx, kinds: frozenset[StartKind], *, record: bool
    ) -> Begin:
        """Take the slot (or yield) in ``cx``; the caller saves it -- which writes only if
        something changed."""
        return slot.begin(
            cx, kinds, record=record, config=self.config, outbox=self.outbox, door=self.door,
            instance_id=self.instance.instance_id,
        )

    def begin(
        self, tx: Tx, conversation_id: str, kinds: frozenset[StartKind], *, record: bool
    ) -> Begin:
        """The unit that takes the slot for ``kinds`` (or yields)."""
        return written(
            tx, conversation_id, self.clock,
            lambda cx: self.begin_locked(cx, kinds, record=record),
        )

    def begin_with(
        self, tx: Tx, conversation_id: str, kind: StartKind,
        write: Callable[[ConversationTx], T], *, record: bool,
        ahead: Callable[[Tx], None] | None = None,
    ) -> tuple[T, Begin]:
        """The unit that runs ``write`` and takes the slot for ``kind``: one commit. ``ahead``
        says what ``write`` reads first (:meth:`Tx.read_ahead`)."""
        cx = ConversationTx.lock(tx, conversation_id, self.clock, ahead=ahead)
        result = write(cx)
        begin = self.begin_locked(cx, frozenset({kind}), record=record)
        cx.save()
        return result, begin

    def alone(
        self, tx: Tx, conversation_id: str, write: Callable[[ConversationTx], T],
        *, ahead: Callable[[Tx], None] | None = None,
    ) -> T:
        """The unit that runs ``write`` when its start is left to a unit of its own."""
        cx = ConversationTx.lock(tx, conversation_id, self.clock, ahead=ahead)
        result = write(cx)
        # A task's end written beside a turn: its notice is accepted now, not when a turn reads
        # it (M13); the turn holding the slot reads it at its next safe point, the next turn
        # first.
        journal.accept_due(cx, self.door)
        cx.save()
        return result

    def would_start(self, tx: Tx, conversation_id: str) -> bool:
        """Whether a re-check of the conversation would start a turn now."""
        return slot.would_start(
            tx, conversation_id, self.clock.now_us(),
            inputs_per_turn=self.config.inputs_per_turn,
            max_attempts=self.outbox.config.max_attempts,
        )

    async def keep(self, plan: TurnPlan, entry: Entry) -> None:
        """Extend the slot while the turn runs; stop the turn when asked to from another
        process, or when the slot was lost."""
        reason = await slot.keep(
            self.store, self.outbox, self.clock, plan, config=self.config, first_wait=False
        )
        if entry.turn is not None:
            entry.interrupt(reason)

    def keeper(self, plan: TurnPlan, entry: Entry) -> Keeper:
        """The keeper of the slot of ``plan``'s turn, run for ``entry``."""
        return Keeper(lambda: self.keep(plan, entry), slot.keep_interval_s(self.config))


class Keeper:
    """The slot's keeper of one turn, started only once the first extension is due: most
    turns end before that, and then no task was made for it."""

    def __init__(self, keep: Callable[[], Coroutine[Any, Any, None]], delay_s: float) -> None:
        self._keep = keep
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = asyncio.get_running_loop().call_later(
            delay_s, self._start
        )

    def _start(self) -> None:
        self._timer = None
        self._task = asyncio.create_task(self._keep())

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        task = self._task
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def written(
    tx: Tx, conversation_id: str, clock: Clock, write: Callable[[ConversationTx], T]
) -> T:
    """Run ``write`` on the locked conversation and save it: a unit of its own."""
    cx = ConversationTx.lock(tx, conversation_id, clock)
    result = write(cx)
    cx.save()
    return result
