"""Waiting on conditions, never on the clock: tests poll what they expect with a deadline, and
fail with what they last saw.

The deadline only stops a broken test from hanging; a passing test returns as soon as the
condition holds, however slow or fast the machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from typing import Any, TypeVar

import httpx

from tidings.runtime.root import Runtime

T = TypeVar("T")
WITHIN_S = 20.0
# A bound on a server's start: its imports alone take seconds of CPU, and a loaded two-core
# machine running four test workers stretches that several times over. Never asserted on.
START_S = 90.0


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


def eventually_sync(
    probe: Callable[[], T],
    until: Callable[[T], object] = bool,
    *,
    what: str,
    within_s: float = WITHIN_S,
    poll_s: float = 0.02,
) -> T:
    """:func:`eventually` for synchronous tests and helpers: call ``probe()`` until ``until``
    holds for what it returns; returns that value.

    Fails after ``within_s`` saying ``what`` was expected and what was last observed.
    """
    deadline = time.monotonic() + within_s
    while True:
        seen = probe()
        if until(seen):
            return seen
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within_s} s: {what}; last observed: {seen!r}")
        time.sleep(poll_s)


def wait_until_sync(
    condition: Callable[[], object], *, what: str, within_s: float = WITHIN_S,
    poll_s: float = 0.02,
) -> None:
    """:func:`wait_until` for synchronous tests: until ``condition()`` holds."""
    eventually_sync(condition, what=what, within_s=within_s, poll_s=poll_s)


def wait_serving(
    url: str,
    *,
    process: subprocess.Popen[Any] | None = None,
    statuses: Collection[int] = (200,),
    within_s: float = START_S,
    output: Callable[[], object] | None = None,
) -> int:
    """Until ``GET {url}/health`` answers one of ``statuses``: a server started in another
    process is up. Returns the status.

    Fails at once if ``process`` (the server's) exits first, else after ``within_s``; either
    failure ends with ``output()`` (the server's log, say) when given.
    """

    def probe() -> int | str:
        if process is not None and (code := process.poll()) is not None:
            raise AssertionError(f"the server of {url} exited with {code} before it answered")
        try:
            return httpx.get(f"{url}/health", timeout=2).status_code
        except httpx.HTTPError as exc:
            return repr(exc)

    try:
        answered = eventually_sync(
            probe, lambda status: status in statuses,
            what=f"{url}/health answers {sorted(statuses)}", within_s=within_s, poll_s=0.05,
        )
    except AssertionError as failed:
        if process is not None and process.poll() is None:
            # A server that never answered is stopped here: left running, it would outlive
            # the test and fail a later one when it is collected.
            process.kill()
            process.wait()
        if output is None:
            raise
        raise AssertionError(f"{failed}\n{output()}") from None
    assert isinstance(answered, int)
    return answered


def wait_for_output(
    arrived: threading.Condition,
    find: Callable[[], T | None],
    *,
    ended: Callable[[], bool],
    what: str,
    shown: Callable[[], object],
    within_s: float = WITHIN_S,
) -> T:
    """What ``find()`` finds in the output a reader thread collects from a stream (a child's
    stderr, a terminal), as soon as it shows.

    ``arrived`` is the condition that thread notifies, holding it, after each read and once
    the stream has ended (``ended()``); ``find`` and ``ended`` are called holding it. Fails when
    the stream ends first or after ``within_s``, with what was shown (``shown()``).
    """
    found: list[T] = []

    def settled() -> bool:
        hit = find()
        if hit is not None:
            found.append(hit)
            return True
        return ended()

    with arrived:
        arrived.wait_for(settled, within_s)
        if found:
            return found[0]
        why = "the stream ended" if ended() else f"not within {within_s} s"
        raise AssertionError(f"{why}: {what}; last observed: {shown()}")


async def first_line(
    stream: asyncio.StreamReader,
    find: Callable[[bytes], T | None],
    *,
    what: str,
    within_s: float = WITHIN_S,
) -> T | None:
    """The first ``find(line)`` that is not None, over the lines read from ``stream`` (a
    child's stdout); None if the stream ends first.

    Fails after ``within_s`` with the last line read.
    """
    last = b""
    try:
        async with asyncio.timeout(within_s):
            while line := await stream.readline():
                last = line
                if (found := find(line)) is not None:
                    return found
            return None
    except TimeoutError:
        raise AssertionError(
            f"not within {within_s} s: {what}; last observed: {last!r}") from None


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


__all__ = (
    "eventually",
    "eventually_sync",
    "first_line",
    "wait_for_output",
    "wait_serving",
    "wait_until",
    "wait_until_sync",
    "wakeup_reaches",
)
