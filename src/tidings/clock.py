"""Time as an injectable dependency: tests move a manual clock instead of sleeping."""

from __future__ import annotations

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
