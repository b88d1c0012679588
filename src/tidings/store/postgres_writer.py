"""PostgreSQL's writers: a few threads that group-commit the units of work, optimistically.

Each writer thread has its own connection and a queue of its own. It takes whatever units are
queued (up to ``max_group``) and runs them in one transaction (``BEGIN``, each unit's
statements, ``COMMIT``), answering every caller after the commit. A round trip costs more
than a statement here, so a savepoint per unit would double the cost of the common case;
instead, when a unit fails, the transaction is rolled back, that unit alone gets its error,
and the others run again in a fresh transaction. That is safe because a unit only touches the
database. Each retry removes the failed unit, so a group is retried at most as often as it has
units (once more when its batched attempt hands it to the careful way, below).

A group's statements are batched (:class:`~tidings.store.postgres_tx.Batch`): ``BEGIN`` goes
with the first statement whose answer a unit needs, the statements whose answers nobody needs
(:meth:`Tx.run_later`) go with the next one -- the same unit's or a later one's -- and the last
unit's go with ``COMMIT``, each time in one pipeline; a row count a unit expects is checked by
the server in the same round trip. A unit of one answered statement and some writes thus costs
two round trips, not four. When anything goes wrong in that attempt -- a statement fails,
``COMMIT`` is refused -- nothing committed: the transaction is rolled back and the group runs
again the careful way (a round trip per statement, each unit's writes and row counts checked
when it ends), which tells exactly which unit failed and why. A unit that raises on its own
fails alone either way. A group whose units were all submitted ``durable=False`` (claims made
on their own) commits without waiting for its fsync: its callers are answered once it is
visible, not once it is durable.

A transient error (serialization failure, deadlock, a connection lost before ``COMMIT``) runs
the group again, a bounded number of times. A connection lost *during* ``COMMIT`` is different:
the transaction may or may not have landed, and every caller of the group is told exactly that
(:class:`CommitOutcomeUnknownError`), never success. A lone single-statement unit (a slot's
extension) runs in autocommit: one round trip, no ``BEGIN``.

Units about one conversation (one ``route``) always go to the same writer: two writers never
hold locks on the same conversation's rows, so concurrent groups cannot deadlock over them.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import select
import threading
import zlib
from collections.abc import Callable

import psycopg

from tidings.errors import CommitOutcomeUnknownError
from tidings.store import postgres_pipeline as pipeline
from tidings.store.base import Query, Row, Wakeups
from tidings.store.feed import FeedSignals
from tidings.store.jobs import STOP, Job, committed, next_group, settle
from tidings.store.postgres_tx import (
    RETRIES,
    TRANSIENT,
    Batch,
    PostgresTx,
    classify,
    fetch,
    transient,
)


class _CommitUnknown(Exception):
    """COMMIT was sent and the connection died before its answer."""


_CAREFULLY = object()
"""What a batched attempt returns when the group must run again the careful way."""


_NO_FSYNC: list[pipeline.Later] = [
    (("BEGIN",), {}, None, None), (("SET LOCAL synchronous_commit = off",), {}, None, None),
]


def _alone(conn: psycopg.Connection[Row], job: Job) -> bool:
    """Run a lone single-statement unit in one round trip, if it can be: in autocommit, or --
    not durable (a claim made on its own) -- as ``BEGIN``, the statement and ``COMMIT`` in one
    pipeline, committed without waiting for its fsync (:meth:`Store.transact` says why). False,
    having sent nothing, when the pipeline cannot take its values: it runs as a group then."""
    assert job.statement is not None
    if job.durable:
        job.result = fetch(conn.execute(job.statement, job.params))
        return True
    answer = pipeline.send(conn, _NO_FSYNC, job.statement, job.params, then="COMMIT")
    if answer is None:
        return False
    job.result = answer.rows
    return True


def _lost(conn: psycopg.Connection[Row], exc: psycopg.Error) -> bool:
    """Whether ``exc`` says the connection is gone (rather than the server refusing)."""
    sqlstate = getattr(exc, "sqlstate", None) or ""
    return conn.closed or not sqlstate or sqlstate[:2] == "08" or sqlstate[:3] == "57P"


def _rollback(conn: psycopg.Connection[Row]) -> int:
    """Roll back what is open; the round trips that took (0 on a closed connection)."""
    if conn.closed:
        return 0
    with contextlib.suppress(psycopg.Error):
        conn.execute("ROLLBACK")
    pipeline.forget(conn)  # psycopg deallocated what the pipelines had prepared
    return 1


def _spoke_while_idle(conn: psycopg.Connection[Row]) -> bool:
    """Whether an idle connection has something to read: the server only speaks unasked to
    say goodbye (a terminated backend, a shutdown), so such a connection is not used."""
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError, psycopg.Error):
        return True
    return bool(readable)


class GroupWriter:
    """The writer threads of one store and the queues that feed them.

    ``groups_committed`` and ``units_committed`` count the transactions that committed and the
    units of work in them, ``round_trips`` the times a writer waited for the server's answer
    (a statement, or a pipeline up to its sync; ``BEGIN``, ``COMMIT`` and ``ROLLBACK`` when
    sent alone; failed and retried attempts too; connecting and psycopg's own preparation of a
    statement not counted): bench figures. After :meth:`stop` every queued unit has its answer.
    """

    def __init__(
        self,
        *,
        queries: dict[str, Query],
        connect: Callable[[], psycopg.Connection[Row]],
        wakeups: Wakeups,
        feed: FeedSignals,
        writers: int,
        max_group: int,
    ) -> None:
        self._queries = queries
        self._connect = connect
        self._wakeups = wakeups
        self._feed = feed
        self._max_group = max_group
        self._queues: list[queue.SimpleQueue[Job | object]] = [
            queue.SimpleQueue() for _ in range(writers)
        ]
        self._next = 0
        self._threads = [
            threading.Thread(
                target=self._loop, args=(jobs, n), name=f"tidings-pg-writer-{n}", daemon=True
            )
            for n, jobs in enumerate(self._queues)
        ]
        self.groups_committed = 0
        self.units_committed = 0
        self._round_trips = [0] * writers  # a writer thread adds to its own only: no lock

    @property
    def round_trips(self) -> int:
        return sum(self._round_trips)

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def submit(self, job: Job, route: str | None) -> None:
        """Queue ``job`` for the writer of its route (any writer, in turn, without one)."""
        if route is None:
            self._next = (self._next + 1) % len(self._queues)
            index = self._next
        else:
            index = zlib.crc32(route.encode("utf-8")) % len(self._queues)
        self._queues[index].put(job)

    async def stop(self) -> None:
        """Let every writer finish the units queued before this call, then end it."""
        for jobs in self._queues:
            jobs.put(STOP)
        for thread in self._threads:
            if thread.is_alive():
                await asyncio.to_thread(thread.join)

    def _loop(self, jobs: queue.SimpleQueue[Job | object], writer: int) -> None:
        conn: psycopg.Connection[Row] | None = None
        try:
            while True:
                group, stop = next_group(jobs, self._max_group)
                if group:
                    conn = self._run_group(conn, group, writer)
                    settle(group)
                if stop:
                    return
        finally:
            self._feed.sending_from(writer, None)
            if conn is not None:
                conn.close()

    def _run_group(
        self, conn: psycopg.Connection[Row] | None, group: list[Job], writer: int
    ) -> psycopg.Connection[Row] | None:
        """Commit every unit of ``group`` it can; give each of the others its error."""
        pending = list(group)
        retries = 0
        carefully = False
        while pending:
            if conn is not None and not conn.closed and _spoke_while_idle(conn):
                conn.close()  # terminated or broken while idle: reconnect before sending
            if conn is None or conn.closed:
                try:
                    conn = self._connect()
                except psycopg.Error as exc:
                    self._feed.sending_from(writer, None)
                    for job in pending:
                        job.error = classify(exc)
                    return None
                self._feed.sending_from(writer, conn.info.backend_pid)
            try:
                lone = pending[0]
                if len(pending) == 1 and lone.statement is not None and _alone(conn, lone):
                    self._round_trips[writer] += 1
                    return conn
                if carefully:
                    failed = self._attempt(conn, pending, writer)
                else:
                    outcome = self._attempt_pipelined(conn, pending, writer)
                    if outcome is _CAREFULLY:
                        # A statement failed inside the pipeline: what followed it there was
                        # skipped, statements the driver took as prepared among them. The
                        # careful run starts on a fresh connection, whose driver and server
                        # agree on what is prepared.
                        conn.close()
                        carefully = True
                        continue
                    failed = outcome  # type: ignore[assignment]
            except _CommitUnknown as unknown:
                for job in pending:
                    job.error = CommitOutcomeUnknownError(str(unknown.__cause__))
                return conn
            except psycopg.Error as exc:  # BEGIN, COMMIT or an autocommit statement failed
                self._round_trips[writer] += _rollback(conn)
                sqlstate = getattr(exc, "sqlstate", None) or ""
                autocommitted = len(pending) == 1 and pending[0].statement is not None
                if autocommitted and sqlstate not in TRANSIENT and transient(exc):
                    # The statement was its own transaction and the connection went with it.
                    pending[0].error = CommitOutcomeUnknownError(str(exc))
                    return conn
                if transient(exc) and retries < RETRIES:
                    retries += 1
                    continue
                for job in pending:
                    job.error = classify(exc)
                return conn
            if failed is None:
                self.groups_committed += 1
                self.units_committed += len(pending)
                committed(pending, self._wakeups, self._feed)
                return conn
            job, error = failed
            self._round_trips[writer] += _rollback(conn)
            if isinstance(error, psycopg.Error) and transient(error) and retries < RETRIES:
                retries += 1
                continue
            job.error = classify(error) if isinstance(error, psycopg.Error) else error
            pending.remove(job)
        return conn

    def _attempt(
        self, conn: psycopg.Connection[Row], pending: list[Job], writer: int
    ) -> tuple[Job, BaseException] | None:
        """Run every unit in one transaction and commit; the first unit that failed, if any."""
        self._round_trips[writer] += 1
        conn.execute("BEGIN")
        for job in pending:
            tx = PostgresTx(self._queries, conn)
            try:
                job.result = job.unit(tx)
                tx.flush()
            except BaseException as exc:  # the unit's caller gets it
                return job, exc
            finally:
                self._round_trips[writer] += tx.round_trips
            job.took(tx)
        try:
            self._round_trips[writer] += 1
            conn.execute("COMMIT")
        except psycopg.Error as exc:
            if _lost(conn, exc):
                raise _CommitUnknown() from exc
            raise  # the server answered: the transaction did not commit
        return None

    def _attempt_pipelined(
        self, conn: psycopg.Connection[Row], pending: list[Job], writer: int
    ) -> tuple[Job, BaseException] | object | None:
        """Run every unit in one transaction, its statements batched, and commit: None once
        committed; the unit that raised and its exception when one raised on its own (not a
        statement's error); :data:`_CAREFULLY` when a statement failed, whoever sent it
        (nothing committed in either case: the caller rolls back)."""
        error: BaseException | None = None
        failed: Job | None = None
        commit_sent = False
        batch = Batch(conn)
        durable = False
        try:
            for job in pending:
                failed = job
                tx = PostgresTx(self._queries, conn, batch=batch)
                job.result = job.unit(tx)
                tx.flush()
                job.took(tx)
                durable = durable or job.durable
            failed = None
        except BaseException as exc:
            error = exc
        if error is None:
            commit_sent = True  # from here on, COMMIT may reach the server
            if not durable:  # claims only: no fsync of its own (Store.transact says why)
                batch.queued.append((("SET LOCAL synchronous_commit = off",), {}, None, None))
            try:
                batch.send("COMMIT")
            except psycopg.Error as exc:
                error = exc
        self._round_trips[writer] += batch.round_trips
        if error is None:
            return None
        if isinstance(error, psycopg.Error):
            if commit_sent and _lost(conn, error):
                raise _CommitUnknown() from error
            return _CAREFULLY  # a statement's error: maybe an earlier unit's, sent late
        assert failed is not None
        return failed, error  # the unit's own (a row count it checked is its own too)
