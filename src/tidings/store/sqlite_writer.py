"""SQLite's writer: units of work run on the event loop, group-committed in one transaction.

SQLite admits one writer at a time and every commit costs an fsync. Units of work therefore run
on the event loop inside one open ``BEGIN IMMEDIATE`` transaction; the transaction commits once
a pass of the loop adds no more units, and each caller is answered only after that shared commit
is durable. A unit that raises fails alone. Units run without a savepoint of their own (two
statements fewer per unit), as PostgreSQL's writers run them: when one raises, the transaction
is rolled back, that unit gets its error, and the units that had run in it run again in a fresh
one, before anything queued behind them -- safe because a unit only touches the database. The
rest of that transaction runs carefully, each unit in a savepoint, so that a failure costs at
most one second run of the units before it. Units made ready by the same
wake-up (a hundred conversations answered by one commit) share the next fsync, so the batch
size follows the load with no delay added to gather it, and no thread hand-off is paid on
either side of a unit.

A lone unit commits on the loop (a serial caller's fsync is the cheapest path there is); a group
of several commits on the writer's own thread, so that the loop runs on while the fsync lasts,
and the units that arrive meanwhile queue for the next group. Callers are answered a slice per
pass of the loop (:class:`~tidings.store.jobs.Answerer`).

When another process holds the write lock, ``BEGIN`` is retried with short pauses (the loop keeps
running) for up to the busy timeout, and the units that arrive meanwhile queue behind it in
order. Between two groups the same thread runs the checkpoints
(:mod:`tidings.store.sqlite_checkpoint`), never inside a commit on the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tidings.errors import DatabaseBusyError, StoreError
from tidings.store.base import Query, Wakeups
from tidings.store.feed import FeedSignals
from tidings.store.jobs import PASS_S, Answerer, Job, committed
from tidings.store.sqlite_checkpoint import Checkpointer
from tidings.store.sqlite_tx import SqliteTx, Synchronous, classify

_GATHER_PASSES = 3
"""Passes of the loop a group may wait for more units (each pass must have added one)."""


class LoopWriter:
    """The one writer of a SQLite store: its connection, the open group and the units queued.

    Used on one event loop only (the store's). ``conn`` is set once the store has opened and
    migrated the database; the store closes it after :meth:`close`.
    """

    def __init__(
        self,
        *,
        queries: dict[str, Query],
        wakeups: Wakeups,
        feed: FeedSignals,
        checkpoints: Checkpointer,
        synchronous: Synchronous,
        busy_timeout_ms: int,
        max_group: int,
    ) -> None:
        self.conn: sqlite3.Connection | None = None
        self._queries = queries
        self._wakeups = wakeups
        self._feed = feed
        self._checkpoints = checkpoints
        self._synchronous = synchronous
        self._busy_timeout_ms = busy_timeout_ms
        self._max_group = max_group
        self._open = False  # the group's transaction is open on the writer
        self._careful = False  # a unit failed in this transaction: the rest run in savepoints
        self._again_running = False  # units run again after a rollback (_again)
        self._group: list[Job] = []  # units run in it, answered at its commit
        self._waiting: deque[Job] = deque()  # units queued behind a BEGIN that found it busy
        self._runner: asyncio.Task[None] | None = None  # runs the waiting units
        self._commit_handle: asyncio.Handle | None = None
        self._last_group = 0  # units in the last group committed
        self._seen = 0
        self._passes = 0
        self._answerer = Answerer()  # callers answered a slice per pass of the loop
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="tidings-sqlite-writer")
        self._away: asyncio.Future[Any] | None = None  # the writer's commit or checkpoint
        self._closed = False
        self.groups_committed = 0
        self.units_committed = 0

    def submit(self, job: Job) -> None:
        """Run ``job`` now, in the caller's step, unless units are waiting already; its future
        is answered at its group's commit (or at once, with the error it failed with)."""
        # One writer, in submission order: every route is already ordered.
        future, loop = job.future, job.loop
        if (not job.durable and self._synchronous == "FULL" and self._last_group <= 1
                and not self._open and not self._waiting and self._away is None
                and self._alone(job)):
            return
        try:
            ready = not self._waiting and self._away is None and (
                self._open or self._begin() is None)
        except StoreError as exc:
            future.set_exception(exc)
            return
        if not ready:
            # The writer is away (a commit or checkpoint on its thread), or another process
            # holds the database: queue behind the units already waiting, loop running on.
            self._waiting.append(job)
            self._start_runner(loop)
            return
        self._run(job)
        self._schedule_commit(loop)
        if job.error is not None:
            future.set_exception(job.error)

    def _alone(self, job: Job) -> bool:
        """Run a unit that need not be durable (a claim) in a transaction of its own, now,
        committed without waiting for the disk: ``synchronous=NORMAL`` for that commit alone
        (SQLite takes it only between transactions). Only while units come one at a time (the
        last group was one unit): under load a claim joins the group at hand, whose fsync it
        shares, rather than splitting it. The WAL keeps commits in order, so the
        next durable commit's fsync makes it durable too; a crash of this process loses
        nothing (the OS has the WAL), a power failure may lose the claim (its signals are ready
        again). False, having changed nothing, when another process holds the write lock."""
        conn = self.conn
        assert conn is not None
        conn.execute("PRAGMA synchronous = NORMAL")
        try:
            if self._begin() is not None:
                return False  # busy: the unit queues as any other, and waits durably
            self._run(job)
            self._commit()
        except StoreError as exc:  # BEGIN failed otherwise than busy: the caller's answer
            job.error = exc
        finally:
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
        if job.error is not None and not job.future.done():
            job.future.set_exception(job.error)
        return True

    def _schedule_commit(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self._open:
            return
        if len(self._group) >= self._max_group:
            self._commit()
        elif self._commit_handle is None:
            self._seen, self._passes = len(self._group), 0
            self._commit_handle = loop.call_soon(self._commit_soon)

    def _begin(self) -> DatabaseBusyError | None:
        """Open the group's transaction now; the busy error if another connection holds the
        write lock (raises for any other failure)."""
        assert self.conn is not None
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            error = classify(exc)
            if isinstance(error, DatabaseBusyError):
                return error
            raise error from exc
        self._open = True
        return None

    def _start_runner(self, loop: asyncio.AbstractEventLoop) -> None:
        """Have the queued units run, in order, as soon as the writer can take them."""
        if self._runner is None:
            self._runner = loop.create_task(self._run_waiting())

    async def _run_waiting(self) -> None:
        """Run the units that queued, in order, for up to PASS_S per pass of the loop, opening
        the transaction again whenever it is closed."""
        loop = asyncio.get_running_loop()
        try:
            while self._waiting:
                if not self._open and not await self._begin_when_free():
                    return
                began = time.perf_counter()
                while self._waiting and self._open:
                    job = self._waiting.popleft()
                    self._run(job)
                    if job.error is not None and not job.future.done():
                        job.future.set_exception(job.error)
                    if time.perf_counter() - began >= PASS_S:
                        break  # the rest in the next pass: the loop's lag stays bounded
                self._schedule_commit(loop)
                if self._waiting:
                    await asyncio.sleep(0)
        finally:
            self._runner = None

    async def _begin_when_free(self) -> bool:
        """Wait until the writer is back, then retry BEGIN with growing pauses for up to the
        busy timeout; on failure every queued unit learns why."""
        while self._away is not None:
            await self._wait_for(self._away)
        deadline = time.monotonic() + self._busy_timeout_ms / 1000
        pause = 0.0005
        while True:
            try:
                busy = self._begin()
            except StoreError as exc:
                self._fail_waiting(exc)
                return False
            if busy is None:
                return True
            if time.monotonic() >= deadline:
                self._fail_waiting(busy)
                return False
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.01)

    @staticmethod
    async def _wait_for(pending: asyncio.Future[Any]) -> None:
        """Wait until ``pending`` is done and its done-callbacks have run (they clear it)."""
        with contextlib.suppress(Exception):
            await asyncio.shield(pending)
        await asyncio.sleep(0)

    def _fail_waiting(self, error: BaseException) -> None:
        while self._waiting:
            job = self._waiting.popleft()
            if not job.future.done():
                job.future.set_exception(error)

    def _run(self, job: Job) -> None:
        """Run one unit in the open transaction: on success it joins the group (answered at the
        group's commit); on failure ``job.error`` says why and nothing of it stays. A unit runs
        without a savepoint: its failure rolls the transaction back, and the units that had run
        in it run again at once in a fresh one (:meth:`_again`). That transaction runs
        carefully, each unit in a savepoint, so that a failure there leaves the others in
        place."""
        conn = self.conn
        assert conn is not None
        tx = SqliteTx(self._queries, conn)
        saved = self._careful
        try:
            if saved:
                conn.execute("SAVEPOINT unit")
            job.result = job.unit(tx)
            if saved:
                conn.execute("RELEASE unit")
        except BaseException as exc:
            job.error = classify(exc) if isinstance(exc, sqlite3.Error) else exc
            if job.error is not exc:
                job.error.__cause__ = exc
            try:
                if conn.in_transaction:
                    conn.execute("ROLLBACK TO unit" if saved else "ROLLBACK")
                    if saved:
                        conn.execute("RELEASE unit")
            except sqlite3.Error:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            if not conn.in_transaction:
                # Rolled back, or a fatal error (disk full, I/O) ended the transaction: the
                # units that had run in it run again.
                self._again(job.loop)
            return
        job.took(tx)
        self._group.append(job)

    def _again(self, loop: asyncio.AbstractEventLoop) -> None:
        """The transaction was rolled back under the group: its units run again now, in order,
        in a fresh transaction that runs carefully -- or, when another process holds the write
        lock, first among the queued units. A unit failing on its second run is answered with
        its error; a transaction that cannot begin fails them all with why. A rerun whose
        transaction ends too (a fatal error) is taken up by the loop already running here."""
        self._open = False
        if self._again_running:
            return
        todo, self._group = self._group, []
        self._again_running = True
        try:
            while todo:
                self._careful = True
                try:
                    busy = self._begin()
                except StoreError as exc:
                    self._finish(todo, exc)
                    return
                if busy is not None:
                    self._waiting.extendleft(reversed(todo))
                    self._start_runner(loop)
                    return
                rest: list[Job] = []
                for n, job in enumerate(todo):
                    job.result = None
                    self._run(job)
                    if job.error is not None and not job.future.done():
                        job.future.set_exception(job.error)
                    if not self._open:  # its failure ended this transaction too
                        rest, self._group = [*self._group, *todo[n + 1:]], []
                        break
                todo = rest
        finally:
            self._again_running = False

    def _commit_soon(self) -> None:
        """Commit once a pass of the loop added no unit: units made ready by the same wake-up
        share the fsync, and a lone unit is committed at once (bounded passes and size)."""
        self._commit_handle = None
        size = len(self._group)
        if size > self._seen and self._passes < _GATHER_PASSES and size < self._max_group:
            self._seen, self._passes = size, self._passes + 1
            self._commit_handle = asyncio.get_running_loop().call_soon(self._commit_soon)
            return
        self._commit()

    def _commit(self) -> None:
        """Commit the group: a lone unit on the loop (no hand-off: a serial caller's commit is
        the cheapest path there is), a larger group on the writer's thread, so that the loop
        runs on while the fsync lasts and units arriving meanwhile queue for the next group."""
        if self._commit_handle is not None:
            self._commit_handle.cancel()
            self._commit_handle = None
        group, self._group = self._group, []
        if not self._open:
            return
        self._open = False
        self._careful = False
        self._last_group = len(group)
        if len(group) <= 1 or self._closed:
            self._finish(group, self._commit_sync())
            return
        away = asyncio.get_running_loop().run_in_executor(self._thread, self._commit_sync)
        self._away = away
        away.add_done_callback(lambda done: self._committed(done, group))

    def _commit_sync(self) -> StoreError | None:
        conn = self.conn
        assert conn is not None
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            error = classify(exc)
            error.__cause__ = exc
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            return error
        return None

    def _committed(self, done: asyncio.Future[StoreError | None], group: list[Job]) -> None:
        self._away = None
        error = done.exception() or done.result()
        self._finish(group, error if isinstance(error, BaseException) else None)

    def _finish(self, group: list[Job], error: BaseException | None) -> None:
        """Answer a group's callers: committed (its after-commit work done, listeners woken)
        or failed, every one with ``error``."""
        if error is not None:
            for job in group:
                job.error = error
        elif group:
            self.groups_committed += 1
            self.units_committed += len(group)
            committed(group, self._wakeups, self._feed)
        self._answerer.add(group)
        if error is None:
            self._checkpoint_if_due()

    def _checkpoint_if_due(self) -> None:
        """Copy the WAL back into the database file from the writer's thread once enough was
        written: between two groups, never inside a commit on the loop (the writer's automatic
        checkpoint is off, :mod:`tidings.store.sqlite_checkpoint` says why)."""
        assert self.conn is not None
        changes = self.conn.total_changes
        if (self._away is not None or self._open or self._closed
                or not self._checkpoints.due(changes)):
            return
        away = self._checkpoints.start(self._thread, changes)
        self._away = away
        away.add_done_callback(self._checkpointed)

    def _checkpointed(self, done: asyncio.Future[None]) -> None:
        self._away = None

    async def close(self) -> None:
        """Let the queued units run and the writer come back, commit the open group and answer
        every caller now; then stop the writer's thread and close the checkpoints' connection.
        The store refuses new units from the start of its close."""
        self._closed = True
        while True:  # let queued units run and the writer come back
            pending: asyncio.Future[Any] | None = self._runner or self._away
            if pending is None:
                break
            await self._wait_for(pending)
        if self.conn is not None and self._open:
            self._commit()
        self._answerer.flush()  # every caller learns its outcome now, not in later passes
        self._thread.shutdown(wait=True)
        self._checkpoints.close()
