"""Time as an injectable dependency: tests move a manual clock instead of sleeping."""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import timedelta
from typing import Protocol


class Clock(Protocol):
    """Wall-clock time in integer microseconds since the epoch."""

    def now_us(self) -> int: ...


class SystemClock:
    """The real wall clock."""

    def now_us(self) -> int:
        return time.time_ns() // 1000


class ManualClock:
    """A clock that moves only when told to; deadlines are tested without sleeping."""

    def __init__(self, start_us: int = 1_700_000_000_000_000) -> None:
        self._now_us = start_us

    def now_us(self) -> int:
        return self._now_us

    def advance(self, delta: timedelta) -> None:
        self._now_us += to_us(delta)


def to_us(delta: timedelta) -> int:
    """A duration in whole microseconds."""
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


async def wait_set(event: asyncio.Event, seconds: float) -> bool:
    """Wait until ``event`` is set or ``seconds`` have passed; whether it is set.

    Every timed wait of the runtime goes through here rather than :func:`asyncio.wait_for`:
    before Python 3.12, a ``wait_for`` whose task is cancelled as the event is set returns as if
    nothing happened, so a component's loop shut down at that moment runs on for ever (and its
    shutdown waits for it). :func:`asyncio.timeout` tells a cancellation from its own deadline.
    """
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()
    return event.is_set()
