"""Long-lived components, and the one task group the composition root runs them in.

Each component has ``async run()`` -- it runs until it is shut down -- and an idempotent
``async shutdown()``. :class:`Lifetime` starts every component's ``run()`` in one
:class:`asyncio.TaskGroup` and, on shutdown, stops them one after the other in the order it
was given: what is stopped first can still rely on what is stopped after it (running turns
commit as stopped while the outbox still heartbeats; the outbox retires the instance last).

Every long-lived part of the runtime owns its lifetime: the coordinator, the answers' waits,
the process supervisor, the webhook worker, the instance's heartbeat and the feed hub are each
a :class:`Loop` -- their own work in :meth:`Loop.serve`, their own close in its hooks, the
cancellation between them written once, here -- and the composition root lists the components
themselves, not adapters around their callbacks. A component that already had a ``close()``
others call keeps it as it was; its shutdown calls it, once, at the same point as before.
What a component must do before its task group starts stays a call of its own: the feed hub
listens from ``start()``, called in the boot before any turn can run, not from its ``run()``,
whose task begins only once the boot yields.

A component whose ``run()`` fails is logged and run again after a pause that doubles with each
failure in a row (:data:`RESTART_BASE_S` up to :data:`RESTART_CAP_S`): a sweep, a worker or the
outbox's heartbeat that broke on one bad moment does not stay dead while the runtime goes on.
That is the rule for every component of the runtime: none of them holds a promise that running
on without it would break -- a turn's writes are fenced by its slot, a lost heartbeat only lets
peers take its work up -- so none stops the runtime. Each failure is logged with the pause
before the next run and told to ``on_failure`` (the runtime counts it in its metrics, by
component).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from tidings.clock import Clock, SystemClock

log = logging.getLogger("tidings.lifetime")

RESTART_BASE_S = 0.1
"""The pause before a failed component runs again, the first time."""
RESTART_CAP_S = 30.0
"""The longest pause between two runs of a component that keeps failing."""


class Component(Protocol):
    """A part of the runtime with a lifetime of its own."""

    @property
    def name(self) -> str:
        """The name of the task its ``run()`` runs in."""
        ...

    async def run(self) -> None:
        """Work until :meth:`shutdown`."""
        ...

    async def shutdown(self) -> None:
        """Stop, and return once :meth:`run` has ended. Idempotent."""
        ...


class Loop:
    """A component whose work is one coroutine (:meth:`serve`), cancelled at shutdown.

    A component class derives from it and declares only its own work and its hooks: it
    overrides :meth:`serve` (without one it holds nothing but its place in the shutdown order),
    :meth:`stopping`, which runs at shutdown before the work is cancelled (an owner's close
    that lets the work end well: turns commit as stopped), and :meth:`stopped`, which runs once
    the work has ended (what the work needed to the last: the instance retires). Both run even
    when the work never started (a runtime closed while locked). A ``run()`` that begins after
    shutdown returns at once; one that begins after a failure runs the work again.

    Built from callbacks instead -- ``serve``, ``first`` (the default :meth:`stopping`) and
    ``then`` (the default :meth:`stopped`) -- it is a component around other objects' work.
    """

    def __init__(
        self,
        name: str,
        serve: Callable[[], Awaitable[None]] | None = None,
        *,
        first: Callable[[], Awaitable[None]] | None = None,
        then: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        # Prefixed: a component class's own attributes never meet the loop's.
        self._loop_name = name
        self._loop_serve = serve
        self._loop_first = first
        self._loop_then = then
        self._loop_task: asyncio.Task[object] | None = None
        self._loop_ended = asyncio.Event()
        self._loop_stopping = False

    @property
    def name(self) -> str:
        return self._loop_name

    async def serve(self) -> None:
        """The work; without ``serve`` it holds nothing but its place in the shutdown order."""
        if self._loop_serve is None:
            await asyncio.Event().wait()
        else:
            await self._loop_serve()

    async def stopping(self) -> None:
        """At shutdown, before the work is cancelled (``first``, if given)."""
        if self._loop_first is not None:
            await self._loop_first()

    async def stopped(self) -> None:
        """At shutdown, once the work has ended or if it never started (``then``, if given)."""
        if self._loop_then is not None:
            await self._loop_then()

    async def run(self) -> None:
        """Do the work (:meth:`serve`) until :meth:`shutdown`."""
        if self._loop_stopping:
            return
        self._loop_task = asyncio.current_task()
        self._loop_ended.clear()  # run again after a failure: shutdown waits for this run
        try:
            await self.serve()
        except asyncio.CancelledError:
            if not self._loop_stopping:
                raise  # cancelled from outside: not ours to swallow
        finally:
            self._loop_ended.set()

    async def shutdown(self) -> None:
        """:meth:`stopping`, then the work cancelled and waited for, then :meth:`stopped`.
        Idempotent: the second call does nothing."""
        if self._loop_stopping:
            return
        self._loop_stopping = True
        await self.stopping()
        if self._loop_task is not None:
            self._loop_task.cancel()
            await self._loop_ended.wait()
        await self.stopped()


class Lifetime:
    """The composition root's task group: every component's ``run()`` in one
    :class:`asyncio.TaskGroup`, stopped in the order given."""

    def __init__(
        self, components: Sequence[Component], *, restart_base_s: float = RESTART_BASE_S,
        restart_cap_s: float = RESTART_CAP_S, clock: Clock | None = None,
        on_failure: Callable[[str], None] = lambda name: None,
    ) -> None:
        self.components = tuple(components)
        self._clock: Clock = clock or SystemClock()
        self._on_failure = on_failure
        self._group: asyncio.Task[None] | None = None
        self._restart = (restart_base_s, restart_cap_s)
        self._stopping = asyncio.Event()
        self.restarts = 0
        """How many times a failed component was run again."""

    def start(self) -> None:
        """Start every component (once)."""
        if self._group is None:
            self._group = asyncio.create_task(self._run_all(), name="tidings-lifetime")

    async def _run_all(self) -> None:
        async with asyncio.TaskGroup() as group:
            for component in self.components:
                group.create_task(self._guarded(component), name=component.name)

    async def _guarded(self, component: Component) -> None:
        """Run ``component`` until it returns; after a failure, log it and run it again once a
        pause has passed, unless shutdown began meanwhile."""
        base, cap = self._restart
        failures = 0
        while True:
            try:
                await component.run()
                return
            except Exception:
                failures += 1
                pause = min(cap, base * 2 ** (failures - 1))
                log.exception("%s ended on an error (%d in a row); it runs again in %.1f s",
                              component.name, failures, pause)
                self._on_failure(component.name)
            if await self._clock.wait(self._stopping, pause):
                return
            self.restarts += 1

    async def shutdown(self) -> None:
        """Shut every component down, in order -- started or not. Idempotent."""
        group, self._group = self._group, None
        self._stopping.set()  # a failed component waiting to run again does not
        try:
            for component in self.components:
                await component.shutdown()
        except BaseException:
            if group is not None:  # a shutdown failed: what still runs is cancelled
                group.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await group
            raise
        if group is not None:
            await group  # every run() has ended: the group closes


async def first_of(*waits: Awaitable[object]) -> None:
    """Wait until the first of ``waits`` is done; the others are cancelled and reaped."""
    futures = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(futures, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for future in futures:
            future.cancel()
        # Reaped with asyncio.wait, which never raises what they raised: a cancellation of
        # the caller's own, meanwhile, goes on up instead of being taken for theirs. Those
        # done already (the first; a plain future, cancelled) need no reaping.
        pending = [future for future in futures if not future.done()]
        if pending:
            await asyncio.wait(pending)
        for future in futures:
            if not future.cancelled():
                future.exception()  # retrieved: an error after the first end is not news


__all__ = ("RESTART_BASE_S", "RESTART_CAP_S", "Component", "Lifetime", "Loop", "first_of")
