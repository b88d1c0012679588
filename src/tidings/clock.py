"""Time as an injectable dependency: tests move a manual clock instead of sleeping.

A clock tells the time and keeps the runtime's timed waits: every sleep of the kernel (the
sweeps, the keeper, the cool-downs, the polls) is ``clock.sleep`` and every wait for an event
with a deadline is ``clock.wait``, so a test on the :class:`ManualClock` drives them by moving
it, and nothing of the kernel waits on real time behind its back.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import timedelta
from typing import Protocol


class Clock(Protocol):
    """Wall-clock time in integer microseconds since the epoch, and the waits timed by it."""

    def now_us(self) -> int: ...

    async def sleep(self, seconds: float) -> None:
        """Return once ``seconds`` have passed on this clock (at once for zero or less)."""
        ...

    async def wait(self, event: asyncio.Event, seconds: float) -> bool:
        """Wait until ``event`` is set or ``seconds`` have passed; whether it is set."""
        ...


class SystemClock:
    """The real wall clock."""

    def now_us(self) -> int:
        return time.time_ns() // 1000

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    async def wait(self, event: asyncio.Event, seconds: float) -> bool:
        return await wait_set(event, seconds)


class ManualClock:
    """A clock that moves only when told to; deadlines are tested without sleeping.

    Its sleeps and timed waits end when :meth:`advance` moves it past their end (or their event
    is set), never on real time: a test moves the clock to run the sweeps, the keeper or a
    cool-down, and they do not run behind its back.
    """

    def __init__(self, start_us: int = 1_700_000_000_000_000) -> None:
        self._now_us = start_us
        self._sleepers: list[tuple[int, asyncio.Future[None]]] = []

    def now_us(self) -> int:
        return self._now_us

    def advance(self, delta: timedelta) -> None:
        """Move the clock on by ``delta``; the sleeps it ends wake (safe from any thread)."""
        self._now_us += to_us(delta)
        due = [f for end, f in self._sleepers if end <= self._now_us]
        self._sleepers = [(end, f) for end, f in self._sleepers if end > self._now_us]
        for future in due:
            loop = future.get_loop()
            if not loop.is_closed():
                loop.call_soon_threadsafe(_wake, future)

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (self._now_us + max(1, round(seconds * 1e6)), future)
        self._sleepers.append(entry)
        try:
            await future
        finally:
            if entry in self._sleepers:
                self._sleepers.remove(entry)

    async def wait(self, event: asyncio.Event, seconds: float) -> bool:
        if event.is_set():
            return True
        waits = (asyncio.ensure_future(event.wait()), asyncio.ensure_future(self.sleep(seconds)))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waits:
                task.cancel()
        return event.is_set()


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def to_us(delta: timedelta) -> int:
    """A duration in whole microseconds."""
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


async def wait_set(event: asyncio.Event, seconds: float) -> bool:
    """Wait until ``event`` is set or ``seconds`` of real time have passed; whether it is set.

    The system clock's timed waits go through here rather than :func:`asyncio.wait_for`:
    before Python 3.12, a ``wait_for`` whose task is cancelled as the event is set returns as if
    nothing happened, so a component's loop shut down at that moment runs on for ever (and its
    shutdown waits for it). :func:`asyncio.timeout` tells a cancellation from its own deadline.
    """
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()
    return event.is_set()
