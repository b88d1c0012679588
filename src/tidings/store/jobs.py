"""What the group-committing writers of both dialects share: the queued unit and its answer."""

from __future__ import annotations

import asyncio
import queue
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tidings.store.base import Tx, Wakeups
from tidings.store.feed import FeedSignals, merge_hints

STOP = object()
"""Put on a writer's queue to stop it once the units queued before it are done."""


@dataclass(slots=True)
class Job:
    """One unit of work waiting for a writer, and what its caller will be told."""

    unit: Callable[[Tx], Any]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    statement: str | None = None  # a one-statement query, which may run in autocommit
    params: dict[str, Any] = field(default_factory=dict)
    durable: bool = True  # False: may be answered before the disk has it (Store.transact)
    result: Any = None
    error: BaseException | None = None
    after_commit: list[Callable[[], None]] = field(default_factory=list)
    woken: set[str] = field(default_factory=set)
    journaled: dict[str, int] = field(default_factory=dict)
    changed: set[str] = field(default_factory=set)

    def took(self, tx: Tx) -> None:
        """Keep what the unit asked for after its commit."""
        self.after_commit = tx._take_after_commit()
        self.woken = tx._woken
        self.journaled = tx._journaled
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
    for job in jobs:
        woken |= job.woken
        changed |= job.changed
        if job.journaled:
            merge_hints(journaled, job.journaled)
        for callback in job.after_commit:
            callback()
    if woken:
        wakeups.notify_many(woken)
    if changed:
        wakeups.changed_many(changed)
    feed.journal_advanced(journaled)


def answer(jobs: list[Job]) -> None:
    """Answer callers on their loop, which must be the running one (a writer on the loop
    calls it directly; :func:`settle` schedules it from a writer's thread)."""
    for job in jobs:
        if job.future.done():
            continue  # the caller stopped waiting; the outcome stands either way
        if job.error is not None:
            job.future.set_exception(job.error)
        else:
            job.future.set_result(job.result)


def settle(jobs: list[Job]) -> None:
    """Answer every caller of a group: one wake-up of each event loop, not one per unit."""
    by_loop: dict[asyncio.AbstractEventLoop, list[Job]] = {}
    for job in jobs:
        by_loop.setdefault(job.loop, []).append(job)
    for loop, batch in by_loop.items():
        if not loop.is_closed():
            loop.call_soon_threadsafe(answer, batch)
