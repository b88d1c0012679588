"""Asking and waiting: what became of a posted input, once its run has answered.

An input's answer is read from the database alone, in one snapshot, so every process of a
cluster reads the same one:

- the input's row: queued, materialized (naming the run that read it: the turn it started,
  the later turn that took it from the queue, or the running turn it joined as a steer) or
  cancelled (withdrawn before any run read it);
- while it is queued, the run holding the conversation's slot, when that run took it as it
  started (a turn writes the inputs it took at its first commit: until then they are queued);
- the run, with the status the run reads give (``awaiting_approval`` while it holds on a call
  nobody has decided), and, once it ended, its final assistant text.

A wait is over when the input was cancelled, or when the run that read it ended or awaits
approval. Between looks it sleeps: it wakes when a unit of this process that changed the
conversation's runs or inputs commits (the store's watchers), and polls every ``poll`` for
what other processes of a PostgreSQL cluster commit. Its end never loses the input, which
committed before the wait began: on a timeout (or a shutdown) the answer is the input and its
run as they stand, and the input is read and answered later as any other.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import timedelta

from tidings.errors import InvalidInputError, StoreError
from tidings.mail import queue
from tidings.records.rows import input_from_row, run_from_row
from tidings.store import Store, Tx
from tidings.support.lifetime import Loop
from tidings.types import Answer, Input, InputState, RunStatus

log = logging.getLogger("tidings.answers")

DEFAULT_TIMEOUT = timedelta(seconds=60)
"""How long ``post(..., wait=True)`` waits when it is given no timeout."""


def answered(answer: Answer) -> bool:
    """Whether a wait for this answer is over: the input was cancelled unread, or the run that
    read it ended or holds for a person's decision (pure)."""
    if answer.input.state is InputState.CANCELLED:
        return True
    run = answer.run
    return (answer.input.state is InputState.MATERIALIZED and run is not None
            and (run.status.ended or run.status is RunStatus.AWAITING_APPROVAL))


def read_answer(tx: Tx, item: Input) -> Answer:
    """The input's answer as it stands in ``tx``'s snapshot (never timed out)."""
    row = tx.one("get_input", input_id=item.input_id)
    now = input_from_row(row) if row is not None else item
    run_id = now.run_id
    if now.state is InputState.QUEUED:
        conversation = tx.one("get_conversation", conversation_id=now.conversation_id)
        holder = None if conversation is None or conversation["slot_token"] is None else (
            conversation["slot_run"])
        if holder is not None and now.input_id in queue.taken_by(
            tx, now.conversation_id, str(holder)
        ):
            run_id = holder  # in flight: the running turn took it and writes it first
    if run_id is None:
        return Answer(now, None, None, timed_out=False)
    run_row = tx.one("get_run", run_id=run_id)
    run = None if run_row is None else run_from_row(run_row)
    reply = None
    if run is not None and run.status.ended:
        found = tx.one(
            "run_reply", conversation_id=now.conversation_id, run_id=run.run_id,
            after_seq=int((row or {}).get("message_seq") or 0),
        )
        reply = None if found is None else str(found["content"])
    return Answer(now, run, reply, timed_out=False)


def timeout_seconds(timeout: timedelta | float) -> float:
    """A wait's bound in seconds; a negative or not-a-number bound is the caller's error."""
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
    if math.isnan(seconds) or seconds < 0:
        raise InvalidInputError(f"a wait's timeout must be 0 or more seconds, not {timeout!r}")
    return seconds


class Answers(Loop):
    """Reads and waits for the answers to inputs (see the module docstring).

    A component of the runtime with no work of its own: it holds its place in the shutdown
    order, where its shutdown ends the waits (:meth:`close`) after the turns' ends."""

    def __init__(self, store: Store, *, poll: timedelta = timedelta(milliseconds=500)) -> None:
        if poll <= timedelta(0):
            raise ValueError("the answers' poll must be positive")
        super().__init__("tidings-answers")
        self.store = store
        self.poll_s = poll.total_seconds()
        self._waiting: set[asyncio.Event] = set()
        self._closing = False
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def waiting(self) -> int:
        """How many waits are in progress here."""
        return len(self._waiting)

    async def read(self, item: Input) -> Answer:
        """The input's answer as it stands now."""
        return await self.store.read(lambda tx: read_answer(tx, item))

    async def wait(
        self, item: Input, timeout: timedelta | float = DEFAULT_TIMEOUT, *,  # noqa: ASYNC109
        until: Callable[[Answer], Awaitable[bool]] | None = None, mark: int | None = None,
    ) -> Answer:
        """Wait until the input is answered (:func:`answered`), for at most ``timeout``
        (seconds, or a :class:`~datetime.timedelta`); then, or when ``until(answer)`` says so of
        the answer a look read, or when the runtime closes, answer as it stands, ``timed_out``.

        ``mark``: the conversation's mark (:meth:`~tidings.store.Wakeups.mark`) as of the
        commit ``item`` was read in. While it is still the mark when the wait begins, no unit
        of this process changed the conversation since, and a queued ``item`` is its answer as
        it stands here: the first look is skipped (a read of the database saved per posted
        turn) and the wait sleeps at once -- any later change wakes it, and other processes'
        are polled for, as for every look."""
        seconds = timeout_seconds(timeout)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        self._idle.clear()
        with self.store.wakeups.watch(item.conversation_id) as changed:
            # Watching first: a change committed after this comparison sets ``changed``.
            look = (mark is None or seconds <= 0 or item.state is not InputState.QUEUED
                    or self.store.wakeups.mark(item.conversation_id) != mark)
            self._waiting.add(changed)
            try:
                answer = Answer(item, None, None, timed_out=False)
                while True:
                    changed.clear()  # before the look: what commits after it wakes the sleep
                    try:
                        if look:
                            answer = await self.read(item)
                        look = True
                    except StoreError as exc:
                        # The input is committed: a passing store failure only delays its
                        # answer (on a timeout, the last one read stands).
                        log.warning("waiting on %s: %s (%s)", item.input_id, exc.code,
                                    exc.message)
                    if answered(answer):
                        return answer
                    left = deadline - loop.time()
                    if left <= 0 or self._closing or (until is not None
                                                      and await until(answer)):
                        return replace(answer, timed_out=True)
                    try:
                        async with asyncio.timeout(min(self.poll_s, left)):
                            await changed.wait()
                    except TimeoutError:
                        pass  # the poll: another process may have changed it
            finally:
                self._waiting.discard(changed)
                if not self._waiting:
                    self._idle.set()

    async def close(self) -> None:
        """End every wait with its answer as it stands, and return once they have answered
        (while the store is still open). Later waits look once. Idempotent."""
        self._closing = True
        for changed in self._waiting:
            changed.set()
        await self._idle.wait()

    stopping = close  # at shutdown


__all__ = ("DEFAULT_TIMEOUT", "Answers", "answered", "read_answer", "timeout_seconds")
