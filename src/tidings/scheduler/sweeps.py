"""The runtime's periodic sweeps, each a named component (see :mod:`tidings.support.lifetime`).

A sweep is the slow path behind a fast one: what a lost wake-up, a lost kick, a full queue or
an instance that died while this one runs left behind is found at the next pass. A pass that
fails (a database hiccup) is logged and the next pass tries again.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta

from tidings.clock import Clock, to_us
from tidings.conversations.lifecycle import complete_restarts
from tidings.errors import TidingsError
from tidings.mail.relay import ChildRelay
from tidings.records.instances import Instance
from tidings.records.outbox import Outbox
from tidings.records.results import Results
from tidings.store import Store
from tidings.support.lifetime import Loop
from tidings.tasks.service import BackgroundTasks, RemoteTasks
from tidings.types import ReconcileReport

log = logging.getLogger("tidings.runtime")


class Sweep(Loop):
    """Runs :meth:`sweep_once` every ``every``, until shut down; None: never."""

    what = "a sweep"

    def __init__(
        self, name: str, every: timedelta | None, clock: Clock,
        *, first: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__(name, first=first)
        self.every = every
        self._clock = clock

    async def serve(self) -> None:
        if self.every is None:
            await super().serve()  # holds its place in the shutdown order only
            return
        while True:
            await self._clock.sleep(to_us(self.every) / 1e6)
            try:
                await self.sweep_once()
            except TidingsError as exc:
                log.warning("%s failed: %s", self.what, exc)

    async def sweep_once(self) -> None:
        raise NotImplementedError


class SlowSweep(Sweep):
    """Expired result envelopes (R1), and the tasks (T9) and restarts (L2) of instances that
    died while this one runs."""

    what = "the slow sweep"

    def __init__(
        self, every: timedelta, *, store: Store, outbox: Outbox, instance: Instance,
        clock: Clock, tasks: BackgroundTasks, results: Callable[[], Results | None],
        remote_tasks: RemoteTasks | None = None,
    ) -> None:
        super().__init__("tidings-results", every, clock)
        self._store, self._outbox = store, outbox
        self._instance = instance
        self._tasks = tasks
        self._results = results
        self._remote_tasks = remote_tasks

    async def sweep_once(self) -> None:
        await self._tasks.ends.reconcile_lost(remote=self._remote_tasks)
        # A restart whose instance went while this one runs is completed here, not only by
        # the next instance to boot (one completion: the settle is fenced).
        await complete_restarts(self._store, self._outbox, self._instance, self._clock)
        results = self._results()
        if results is not None:
            await results.purge()


class RelaySweep(Sweep):
    """Child replies a lost kick, a full parent queue or a gone instance left (M16). Its
    shutdown ends the relay's kicked passes first."""

    what = "the relay sweep"

    def __init__(self, every: timedelta | None, relay: ChildRelay, clock: Clock) -> None:
        super().__init__("tidings-relay", every, clock, first=relay.close)
        self._relay = relay

    async def sweep_once(self) -> None:
        await self._relay.relay_pending()


class Takeover:
    """What gone instances left, taken up at once rather than at a later sweep: at boot, and
    when the outbox's sweep finds a peer on the same database gone while this one runs."""

    def __init__(
        self, *, store: Store, outbox: Outbox, instance: Instance, clock: Clock,
        tasks: BackgroundTasks, conversations: Callable[[], Awaitable[object]],
        relay: ChildRelay, remote: Callable[[], Awaitable[object]] | None = None,
        remote_tasks: RemoteTasks | None = None,
    ) -> None:
        self._store, self._outbox, self._clock = store, outbox, clock
        self._remote = remote
        self._instance = instance
        self._tasks = tasks
        self._conversations = conversations
        self._relay = relay
        self._remote_tasks = remote_tasks

    async def take_up(self) -> None:
        """Their tasks are lost (their processes died with them); their conversations --
        whose slots were voided when the instance was known dead, or have expired -- are
        looked at again; their accepted restarts completed (L2), their replies relayed."""
        await self._tasks.ends.reconcile_lost(remote=self._remote_tasks)
        if self._remote is not None:
            await self._remote()  # remote children's tasks run on at their agents (P5)
        await self._conversations()
        # Fully initialised: restarts that gone instances accepted are completed now (L2).
        await complete_restarts(self._store, self._outbox, self._instance, self._clock)
        await self._relay.relay_pending()  # replies a gone instance did not relay (M16)

    async def instances_gone(self, report: ReconcileReport) -> None:
        """The outbox's sweep found instances gone while this one runs: their work now."""
        log.info("instances gone: %s", ", ".join(report.gone_instances))
        try:
            await self.take_up()
        except TidingsError as exc:
            log.warning("taking up the work of gone instances failed: %s", exc)


__all__ = ("RelaySweep", "SlowSweep", "Sweep", "Takeover")
