"""Waiting on conditions, never on the clock: tests poll what they expect with a deadline, and
fail with what they last saw.

The deadline only stops a broken test from hanging; a passing test returns as soon as the
condition holds, however slow or fast the machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from tidings.runtime.root import Runtime

T = TypeVar("T")
WITHIN_S = 20.0


async def eventually(
    probe: Callable[[], Awaitable[T]],
    until: Callable[[T], object] = bool,
    *,
    what: str,
    within_s: float = WITHIN_S,
    poll_s: float = 0.02,
) -> T:
    """Await ``probe()`` until ``until`` holds for what it returns; returns that value.

    Fails after ``within_s`` saying ``what`` was expected and what was last observed.
    """
    deadline = time.monotonic() + within_s
    while True:
        seen = await probe()
        if until(seen):
            return seen
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within_s} s: {what}; last observed: {seen!r}")
        await asyncio.sleep(poll_s)


async def wait_until(
    condition: Callable[[], object], *, what: str, within_s: float = WITHIN_S,
    poll_s: float = 0.01,
) -> None:
    """Until ``condition()`` (a plain, in-process check) holds; fails after ``within_s``."""

    async def probe() -> object:
        return condition()

    await eventually(probe, what=what, within_s=within_s, poll_s=poll_s)


@contextlib.asynccontextmanager
async def wakeup_reaches(
    rt: Runtime, conversation_id: str, *, within_s: float = WITHIN_S
) -> AsyncIterator[None]:
    """Around a publish to a conversation whose signal queue was empty: on exit, the wake-up
    hint it sent has reached this process.

    The runtime's coordinator subscribed to wake-ups at boot, before this does, so by the time
    this copy arrives the coordinator has been asked for a ``wake`` start: a ``settle`` after
    it waits for that start's decision, whatever it is.
    """
    wakeups = rt.store.wakeups.subscribe()
    try:
        yield
        async with asyncio.timeout(within_s):
            while await wakeups.get() != conversation_id:
                pass
        await asyncio.sleep(0)
    finally:
        rt.store.wakeups.unsubscribe(wakeups)


__all__ = ("eventually", "wait_until", "wakeup_reaches")
