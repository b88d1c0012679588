"""How many turns run at once in this process, and the turns that wait for a person.

A turn holds a place from its start to its end. A turn that holds on tool calls until a person
decides them (approvals) lends its place while it waits -- for up to the approval's lifetime,
an hour by default -- so that calls nobody has decided yet never stop the other
conversations of the process from running. It takes its place back before it goes on: what
it applies runs within the limit, like everything else.

A wait that is cancelled while it takes its place back (the run was stopped, the process
shuts down) holds none; the turn still gives one back as it ends, so that one is owed: the
next place given back settles it instead of freeing one. The count of places is thus exact
whatever the order.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from types import TracebackType


class Capacity:
    """At most ``limit`` turns at once; see the module docstring."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("at least one turn must be able to run")
        self._places = asyncio.Semaphore(limit)
        self._owed = 0
        self.lent = 0
        """Places lent by turns that wait for a person now."""

    def full(self) -> bool:
        """Whether a turn starting now would wait for a place."""
        return self._places.locked()

    async def take(self) -> None:
        await self._places.acquire()

    def give_back(self) -> None:
        if self._owed:
            self._owed -= 1  # a turn whose place was never taken back: it holds none
            return
        self._places.release()

    async def __aenter__(self) -> None:
        await self.take()

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        tb: TracebackType | None) -> None:
        self.give_back()

    def lender(self) -> Callable[[], AbstractAsyncContextManager[None]]:
        """For one turn: a block that lends the turn's place while it waits for a person.
        The turn's held calls wait side by side; the place is lent when the first begins to
        wait and taken back when the last is decided."""
        waiting = 0

        @contextlib.asynccontextmanager
        async def waiting_for_a_person() -> AsyncIterator[None]:
            nonlocal waiting
            waiting += 1
            if waiting == 1:
                self._places.release()
                self.lent += 1
            try:
                yield
            finally:
                waiting -= 1
                if waiting == 0:
                    self.lent -= 1
                    try:
                        await self._places.acquire()
                    except asyncio.CancelledError:
                        self._owed += 1
                        raise

        return waiting_for_a_person


__all__ = ("Capacity",)
