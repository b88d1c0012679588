"""The coordinator's bookkeeping: one entry per conversation with work pending or running here,
and the waits on those entries.

An entry exists only while its conversation has something pending, starting, running or
compacting in this process; an idle conversation has none, and costs nothing. Entries are
touched only in synchronous sections of the event loop, so none is ever held across a model
call or a disk read (C5).

Two waits read them: a post that finds the last turn's driver still finishing waits for it to
go (:meth:`Entries.let_finish`), and a wait for the conversation to settle waits for its entry
to be dropped, taking the last unit's read of the database as its own when that read came
after the wait began (:meth:`Entries.quiet`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from tidings.clock import wait_set
from tidings.turns.runner import TurnOutcome
from tidings.types import StartKind


@dataclass
class Entry:
    """A conversation with work pending or running; dropped as soon as it is idle."""

    kinds: set[StartKind] = field(default_factory=set)
    recheck: bool = False
    record: bool = False
    driver: asyncio.Task[None] | None = None
    turn: asyncio.Task[TurnOutcome] | None = None
    turn_started: bool = False
    stop_reason: str | None = None
    stopped_runs: set[str] = field(default_factory=set)
    """Runs a stop named before their turn task existed here (the gap after the start's
    commit): such a turn begins stopped."""
    compacting: bool = False
    starting: bool = False
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    settled_ns: int | None = None
    """Set when the entry's last unit read, under the lock, that a re-check would start
    nothing: when that unit began (``time.monotonic_ns``). Cleared by every request and
    every unit the driver submits, so it is only ever the newest unit's word."""
    released: bool = False
    """The running turn's end committed (its slot is free); its task may not have returned
    yet. Set from the committing thread, before anything the commit wakes runs."""

    moved: asyncio.Event = field(default_factory=asyncio.Event)
    """Set by every request and when the entry is dropped: what a post waiting for a finishing
    driver (:meth:`Entries.let_finish`) waits on."""

    def turn_released(self) -> None:
        self.released = True

    def interrupt(self, reason: str) -> None:
        """Stop the running turn for ``reason`` (or have it begin stopped)."""
        self.stop_reason = reason
        # A turn whose end has committed is over: cancelling it now would only make it try to
        # end a run that has ended, and lose the outcome its driver is about to read.
        if self.turn is not None and self.turn_started and not self.released:
            self.turn.cancel()


_FINISHING_PASSES = 8
"""How many passes of the loop :meth:`Entries.let_finish` lets a finishing driver have before
it waits for the driver to go."""
_FINISHING_WAIT_S = 2.0
"""How long, at most, :meth:`Entries.let_finish` waits for a finishing driver: its turn's end
has committed, only its return is left (the committing thread's hand-back, the keeper's stop),
so the bound is only a guard against a store that hangs."""


def finishing(entry: Entry) -> bool:
    """Whether the entry's driver has nothing left to run: its turn is over, nothing is pending
    (or it is between a request and its start unit, which a few passes do not end either)."""
    return (entry.driver is not None
            and (entry.turn is None or entry.turn.done() or entry.released)
            and not entry.kinds
            and not entry.recheck and not entry.starting and not entry.compacting)


class Entries:
    """The entries of the conversations with work here, by conversation id."""

    def __init__(self) -> None:
        self._entries: dict[str, Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, conversation_id: str) -> bool:
        return conversation_id in self._entries

    def __iter__(self) -> Iterator[Entry]:
        """The entries (a copy: what a pass over them starts or drops does not disturb it)."""
        return iter(list(self._entries.values()))

    def get(self, conversation_id: str) -> Entry | None:
        return self._entries.get(conversation_id)

    def add(self, conversation_id: str, entry: Entry) -> Entry:
        self._entries[conversation_id] = entry
        return entry

    def drop(self, conversation_id: str, entry: Entry) -> None:
        """Drop the idle entry: whoever waits on it is told."""
        self._entries.pop(conversation_id, None)
        entry.idle.set()
        entry.moved.set()

    async def let_finish(self, conversation_id: str) -> None:
        """Wait while the conversation's driver is finishing (see :func:`finishing`): a few
        passes of the loop, which is all it takes unless the committing thread is slow to hand
        back, then on :attr:`Entry.moved`, at most :data:`_FINISHING_WAIT_S`."""
        for _ in range(_FINISHING_PASSES):
            entry = self._entries.get(conversation_id)
            if entry is None or not finishing(entry):
                return
            await asyncio.sleep(0)
        deadline = time.monotonic() + _FINISHING_WAIT_S
        while (entry := self._entries.get(conversation_id)) is not None and finishing(entry):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            entry.moved.clear()
            await wait_set(entry.moved, left)

    async def quiet(self, conversation_id: str, since_ns: int) -> bool:
        """Wait until the conversation has no entry here. True when its last unit began after
        ``since_ns`` (a ``time.monotonic_ns``) and read under the lock that nothing would start
        (the turn's end, or a start that yielded): that read answers a wait begun at
        ``since_ns``, and no read of the caller's own need follow. False: the caller reads.

        Wake-up hints that are still on their way (a publish's wake-up is handed to the event
        loop after its commit) go first, and an entry they make is waited for in turn.
        """
        while True:
            await asyncio.sleep(0)
            entry = self._entries.get(conversation_id)
            if entry is None:
                return False
            await entry.idle.wait()
            settled = entry.settled_ns
            if settled is not None and settled > since_ns:
                await asyncio.sleep(0)  # a hint already handed to the loop goes first
                if conversation_id not in self._entries:
                    return True
