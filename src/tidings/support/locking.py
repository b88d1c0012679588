"""The locked boot's one check (L1): a facade method that changes state refuses while locked."""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from tidings.errors import RuntimeLockedError

P = ParamSpec("P")
R = TypeVar("R")


class Lockable(Protocol):
    @property
    def locked(self) -> bool:
        """True from a locked boot until the master key is given."""


L = TypeVar("L", bound=Lockable)


def mutation(
    method: Callable[Concatenate[L, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[L, P], Coroutine[Any, Any, R]]:
    """Mark a facade method that changes state: while the runtime is locked it answers
    :class:`RuntimeLockedError` before it reads or writes anything (L1).

    The one place the lock is checked. Every public method that writes -- for a caller or on
    a caller's behalf -- carries it; reads do not, and stay allowed while locked. A stop is a
    mutation too: a locked instance runs nothing, so it has nothing of its own to stop, and
    work running on another (unlocked) instance of the cluster is stopped through that one.
    """

    @functools.wraps(method)
    async def guarded(self: L, /, *args: P.args, **kwargs: P.kwargs) -> R:
        if self.locked:
            raise RuntimeLockedError()
        return await method(self, *args, **kwargs)

    return guarded


__all__ = ("Lockable", "mutation")
