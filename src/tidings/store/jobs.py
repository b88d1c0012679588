"""What the group-committing writers of both dialects share: the queued unit and its answer."""

from __future__ import annotations

import asyncio
import queue
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tidings.store.base import Tx, Wakeups
from tidings.store.feed import FeedSignals, merge_hints, merge_written

STOP = object()
"""Put on a writer's queue to stop it once the units queued before it are done."""

PASS_S = 0.0015
"""How long a pass of the event loop should take at most while a store hands out work: the
callers it answers per pass follow it (see :class:`Answerer`), and SQLite's queued units too.
Other work shares the pass, so its length is about twice this: at 100 busy conversations the
loop lag p99 was 5.7 ms with 2 ms and 4.7 ms with 1.5 ms, at the same turns per second."""

SLICES = (4, 128)
"""The least and the most callers answered per pass."""


@dataclass(slots=True)
class Job:
    """One unit of work waiting for a writer, and what its caller will be told."""

    unit: Callable[[Tx], Any]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    statement: str | None = None  # a one-statement query, which may run in autocommit
    params: dict[str, Any] = field(default_factory=dict)
    durable: bool = True  # False: may be answered before the disk has it (Store.transact)
    answerer: Answerer | None = None  # answers it on its loop (set by a threaded writer's store)
    result: Any = None
    error: BaseException | None = None
    after_commit: list[Callable[[], None]] = field(default_factory=list)
    woken: set[str] = field(default_factory=set)
    journaled: dict[str, int] = field(default_factory=dict)
    written: dict[str, list[object]] = field(default_factory=dict)
    changed: set[str] = field(default_factory=set)

    def took(self, tx: Tx) -> None:
        """Keep what the unit asked for after its commit."""
        self.after_commit = tx._take_after_commit()
        self.woken = tx._woken
        self.journaled = tx._journaled
        self.written = tx._written
        self.changed = tx._changed


def next_group(jobs: queue.SimpleQueue[Job | object], limit: int) -> tuple[list[Job], bool]:
    """Wait for one job, then take every job already queued, up to ``limit``: no delay is
    added to gather a group. The flag says a STOP was taken (the group is still to be run)."""
    group: list[Job] = []
    first = jobs.get()
    if first is STOP:
        return group, True
    assert isinstance(first, Job)
    group.append(first)
    while len(group) < limit:
        try:
            nxt = jobs.get_nowait()
        except queue.Empty:
            break
        if nxt is STOP:
            return group, True
        assert isinstance(nxt, Job)
        group.append(nxt)
    return group, False


def committed(jobs: list[Job], wakeups: Wakeups, feed: FeedSignals) -> None:
    """Run the after-commit work of committed jobs; wake listeners (and watchers) and tell
    the feed once for the group."""
    woken: set[str] = set()
    changed: set[str] = set()
    journaled: dict[str, int] = {}
    written: dict[str, list[object]] = {}
    for job in jobs:
        woken |= job.woken
        if job.changed:
            wakeups.stamp(job.changed)
            changed |= job.changed
        if job.journaled:
            merge_hints(journaled, job.journaled)
            merge_written(written, job.written)
        for callback in job.after_commit:
            callback()
    if woken:
        wakeups.notify_many(woken)
    if changed:
        wakeups.changed_many(changed)
    feed.journal_advanced(journaled, written)


class Answerer:
    """Answers the callers of one event loop a slice per pass of it.

    A group's callers wake in the next pass, and a hundred of them waking at once would hold
    the loop (its timers, its sockets) for all of their work; a slice at a time, the loop's lag
    stays bounded. The slice is sized from what the last one cost: as many callers per pass as
    fit in :data:`PASS_S` at the cost per caller measured (smoothed), within :data:`SLICES`.
    Used on its loop only (a writer thread schedules :meth:`add` there).
    """

    def __init__(self) -> None:
        self._answers: deque[Job] = deque()  # committed or failed, their callers not yet told
        self._answering = False
        self._slice = 16
        self._caller_s: float | None = None  # what answering one caller costs the next pass

    def add(self, jobs: Iterable[Job]) -> None:
        self._answers.extend(jobs)
        if not self._answering:
            self._answering = True
            self._answer_slice()

    def flush(self) -> None:
        """Answer every caller still waiting, now (a store that closes)."""
        answers, self._answers = list(self._answers), deque()
        answer(answers)

    def _answer_slice(self) -> None:
        answers = self._answers
        count = min(self._slice, len(answers))
        answer([answers.popleft() for _ in range(count)])
        # The callers just answered take their next steps in the next pass of the loop; a
        # callback queued now runs right behind those steps and times them.
        asyncio.get_running_loop().call_soon(self._sliced, time.perf_counter(), count)

    def _sliced(self, answered_at: float, count: int) -> None:
        per_caller = (time.perf_counter() - answered_at) / max(count, 1)
        self._caller_s = per_caller if self._caller_s is None else (
            (self._caller_s + per_caller) / 2)
        low, high = SLICES
        self._slice = max(low, min(high, int(PASS_S / max(self._caller_s, 1e-6))))
        if self._answers:
            self._answer_slice()
        else:
            self._answering = False


def answer(jobs: list[Job]) -> None:
    """Answer callers on their loop, which must be the running one (an :class:`Answerer`
    calls it, a slice at a time)."""
    for job in jobs:
        if job.future.done():
            continue  # the caller stopped waiting; the outcome stands either way
        if job.error is not None:
            job.future.set_exception(job.error)
        else:
            job.future.set_result(job.result)


def settle(jobs: list[Job]) -> None:
    """Answer every caller of a group from a writer's thread: one wake-up of each event loop,
    not one per unit, then a slice per pass there (its :class:`Answerer`)."""
    by_loop: dict[asyncio.AbstractEventLoop, list[Job]] = {}
    for job in jobs:
        by_loop.setdefault(job.loop, []).append(job)
    for loop, batch in by_loop.items():
        if not loop.is_closed():
            answerer = batch[0].answerer
            assert answerer is not None  # a threaded writer's store gives each job its loop's
            loop.call_soon_threadsafe(answerer.add, batch)
