"""The store: the only place that speaks SQL.

A unit of work is a plain synchronous function over a :class:`Tx`. The store runs it in a
transaction off the event loop and answers the awaiting caller only once the transaction is
durable (or has failed). Everything the caller wants to commit together -- a domain change, an
event and its delivery, a transcript row and an acknowledgment -- goes in one unit.

SQL text lives in named blocks, written once for both dialects where it can be and overridden
by a dialect only where it must differ (:mod:`tidings.store.queries`). Both dialects resolve
the same names with the same result shapes, so the logic above the store is written once. A
block may hold several statements (SQLite cannot modify data inside a CTE, PostgreSQL can, and
on PostgreSQL every statement is a round trip); the rows of its last statement are its result.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, TypeVar

from tidings.errors import InvalidInputError, SchemaError
from tidings.store.feed import FeedSignals, call_in
from tidings.store.queries import Query as Query
from tidings.store.queries import load_queries as load_queries
from tidings.store.queries import split_statements as split_statements
from tidings.store.queries import sql_text as sql_text
from tidings.types import ConversationId, InstanceId

T = TypeVar("T")
Row = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Migration:
    """A numbered, additive, idempotent schema change."""

    version: int
    name: str
    statements: tuple[str, ...]


def load_migrations(dialect: str) -> list[Migration]:
    folder = resources.files("tidings.store").joinpath("sql", dialect, "migrations")
    found: list[Migration] = []
    for entry in folder.iterdir():
        match = re.fullmatch(r"(\d{4})_([a-z0-9_]+)\.sql", entry.name)
        if match is None:
            continue
        statements = tuple(split_statements(entry.read_text("utf-8")))
        found.append(Migration(int(match.group(1)), match.group(2), statements))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise ValueError(f"{dialect} migrations are not numbered 1..n: {versions}")
    return found


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _check_value(name: str, value: Any, refuse_nul: bool) -> None:
    """Refuse a value the database cannot hold: an integer outside the signed 64-bit range
    (SQLite's driver overflows; PostgreSQL's bigint is out of range, or compares it as
    numeric), and, where ``refuse_nul``, text holding NUL (PostgreSQL's text cannot)."""
    if isinstance(value, int):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise InvalidInputError(f"{name} is outside the signed 64-bit integer range")
    elif refuse_nul and isinstance(value, str) and "\x00" in value:
        raise InvalidInputError(f"{name} must not contain NUL characters")


class Tx(ABC):
    """One open transaction, handed to a unit of work.

    Only named queries run here; a unit never sees a connection. Raising from a unit rolls back
    everything it did, and nothing else.
    """

    def __init__(self, queries: dict[str, Query]) -> None:
        self._queries = queries
        self._after_commit: list[Callable[[], None]] = []
        self._woken: set[str] = set()
        self._journaled: dict[str, int] = {}
        self._written: dict[str, list[object]] = {}
        self._changed: set[str] = set()

    def all(self, query: str, **params: Any) -> list[Row]:
        """Run a named query; the rows of its last statement."""
        rows: list[Row] = []
        bound = self._bind(params)
        for statement in self._statements(query):
            rows, _ = self._run(statement, bound)
        return rows

    def one(self, query: str, **params: Any) -> Row | None:
        rows = self.all(query, **params)
        return rows[0] if rows else None

    def read_ahead(self, query: str, **params: Any) -> None:
        """Say that the unit reads ``query`` with ``params`` right after the next statement
        that answers (the conversation's locked read, say). A dialect may send the read with
        that statement (PostgreSQL: one round trip for both) and answer the unit's read of the
        same query and values from it, only when nothing else ran in between; here the read
        runs when it is made."""
        return None

    def execute(self, query: str, **params: Any) -> int:
        """Run a named query; the number of rows its last statement changed."""
        return self._execute(query, params)

    def _execute(self, query: str, params: dict[str, Any]) -> int:
        count = 0
        bound = self._bind(params)
        for statement in self._statements(query):
            _, count = self._run(statement, bound)
        return count

    def run_later(
        self,
        query: str,
        *,
        expect: int | None = None,
        mismatch: Callable[[], Exception] | None = None,
        **params: Any,
    ) -> None:
        """Run a named query whose rows the unit does not need.

        A dialect may hold it and send it with the next statements (PostgreSQL pipelines them:
        one round trip for several writes); it runs before any later query that answers and
        before the transaction commits. With ``expect``, it must change exactly that many rows, or
        ``mismatch()`` is raised -- at the latest when the unit ends, so the unit rolls back.
        """
        count = self._execute(query, params)  # the caller's own dict: no copy of it
        if expect is not None and count != expect:
            raise (mismatch or _mismatch(query, expect, count))()

    def flush(self) -> None:
        """Send whatever :meth:`run_later` holds (called by the store at the end of a unit).

        Statements run at once here, so there is never anything to send.
        """
        return None

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once this unit's changes are durable (never if they are not)."""
        self._after_commit.append(callback)

    def journaled(self, conversation_id: str, seq: int, written: object) -> None:
        """This unit wrote ``conversation_id``'s journal up to ``seq``: once it commits, the
        feed's watchers in this process are told (a hint; other processes hear it from the
        dialect, or poll), with ``written``, what it wrote, for them to take instead of
        reading it back (opaque here)."""
        if seq > self._journaled.get(conversation_id, 0):
            self._journaled[conversation_id] = seq
        self._written.setdefault(conversation_id, []).append(written)

    def changed(self, conversation_id: str) -> None:
        """Tell this process's watchers of the conversation (:meth:`Wakeups.watch`) that its
        runs or inputs changed, once this unit commits (never if it does not)."""
        self._changed.add(conversation_id)

    def _statements(self, query: str) -> tuple[str, ...]:
        try:
            return self._queries[query].statements
        except KeyError:
            raise KeyError(f"no query named {query!r}") from None

    def _take_after_commit(self) -> list[Callable[[], None]]:
        callbacks, self._after_commit = self._after_commit, []
        return callbacks

    def run_ddl(self, statement: str) -> None:
        """Run one statement of a migration file (no parameters)."""
        self._run(statement, {})

    refuses_nul = False
    """Whether this dialect's text cannot hold NUL (PostgreSQL's cannot; SQLite's can)."""

    def _bind(self, params: dict[str, Any]) -> dict[str, Any]:
        """Adapt parameters to the driver once per query (the dict is the caller's own)."""
        return bind(params, refuse_nul=self.refuses_nul, adapt_list=self._adapt_list)

    def _adapt_list(self, value: list[Any] | tuple[Any, ...]) -> Any:
        """A list parameter as the driver takes it (checked already)."""
        return value

    @abstractmethod
    def _run(self, statement: str, params: dict[str, Any]) -> tuple[list[Row], int]: ...


def bind(
    params: dict[str, Any], *, refuse_nul: bool, adapt_list: Callable[[Any], Any]
) -> dict[str, Any]:
    """Adapt parameters to the driver, in place (the dict is the caller's own).

    A value the database cannot hold is refused first, as the caller's bad input
    (:class:`InvalidInputError`): never a database error (a 503) or a driver's crash (a
    500). One pass over the values: this runs for every statement of every unit.
    """
    for name, value in params.items():
        cls = value.__class__
        if cls is str:
            if refuse_nul and "\x00" in value:
                raise InvalidInputError(f"{name} must not contain NUL characters")
        elif cls is int:
            if not _INT64_MIN <= value <= _INT64_MAX:
                raise InvalidInputError(f"{name} is outside the signed 64-bit integer range")
        elif value is None or cls is float or cls is bytes:
            continue
        elif cls is list or cls is tuple:
            for item in value:
                _check_value(name, item, refuse_nul)
            params[name] = adapt_list(value)
        else:
            _check_value(name, value, refuse_nul)  # enums, bools and other subclasses
    return params


def _mismatch(query: str, expect: int, count: int) -> Callable[[], Exception]:
    return lambda: AssertionError(f"{query} changed {count} rows, not {expect}")


class Wakeups:
    """In-process fan-out of "this conversation has new signals" hints, and of "this
    conversation's runs or inputs changed" hints to the watchers of one conversation.

    A wake-up is only a hint: duplicates are harmless and a lost one is re-found by polling
    or the sweep. Thread-safe; subscribers are asyncio queues, watchers asyncio events, each
    bound to its own loop.
    """

    MARKS = 10_000
    """How many conversations' last-change marks are kept (the most recently changed)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: list[tuple[asyncio.AbstractEventLoop, asyncio.Queue[str]]] = []
        self._watchers: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}
        self._tick = 0
        self._marks: dict[str, int] = {}  # in order of change, oldest first

    def stamp(self, conversation_ids: Iterable[str]) -> None:
        """A unit that changed these conversations' runs or inputs committed: give each a new
        mark (called at each commit, unit by unit, before the unit's after-commit work)."""
        with self._lock:
            for conversation_id in conversation_ids:
                self._tick += 1
                self._marks.pop(conversation_id, None)
                self._marks[conversation_id] = self._tick
            while len(self._marks) > self.MARKS:
                del self._marks[next(iter(self._marks))]

    def mark(self, conversation_id: str) -> int | None:
        """The mark of the conversation's last change committed in this process; ``None`` if
        it is not known (never changed here, or not among the last :data:`MARKS`). Marks only
        grow: the same mark later means no unit of this process changed it since."""
        with self._lock:
            return self._marks.get(conversation_id)

    def subscribe(self) -> asyncio.Queue[str]:
        queue: asyncio.Queue[str] = asyncio.Queue()
        with self._lock:
            self._subscribers.append((asyncio.get_running_loop(), queue))
        return queue

    def unsubscribe(self, queue: asyncio.Queue[str]) -> None:
        with self._lock:
            self._subscribers = [(lp, q) for lp, q in self._subscribers if q is not queue]

    def notify(self, conversation_id: str) -> None:
        self.notify_many((conversation_id,))

    def notify_many(self, conversation_ids: Iterable[str]) -> None:
        """Hand every id to every subscriber: one call into each subscriber's loop."""
        ids = tuple(conversation_ids)
        with self._lock:
            subscribers = list(self._subscribers)
        for loop, queue in subscribers:
            if not loop.is_closed():
                call_in(loop, _put_all, queue, ids)


    @contextlib.contextmanager
    def watch(self, conversation_id: str) -> Iterator[asyncio.Event]:
        """An event set each time a unit of this process that changed the conversation's runs
        or inputs commits (:meth:`Tx.changed`); clear it before each look at the database.
        Changes made by other processes are not seen here: a watcher also polls."""
        entry = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            self._watchers.setdefault(conversation_id, []).append(entry)
        try:
            yield entry[1]
        finally:
            with self._lock:
                left = [w for w in self._watchers.get(conversation_id, ()) if w is not entry]
                if left:
                    self._watchers[conversation_id] = left
                else:
                    self._watchers.pop(conversation_id, None)

    def changed_many(self, conversation_ids: Iterable[str]) -> None:
        """Set the events of every watcher of these conversations, in each one's loop."""
        with self._lock:
            watchers = [w for c in conversation_ids for w in self._watchers.get(c, ())]
        for loop, event in watchers:
            if not loop.is_closed():
                call_in(loop, event.set)


def _put_all(queue: asyncio.Queue[str], ids: tuple[str, ...]) -> None:
    for conversation_id in ids:
        queue.put_nowait(conversation_id)


class Store(ABC):
    """A database opened by tidings: migrated, with units of work run off the event loop."""

    dialect: str

    def __init__(self) -> None:
        self.queries = load_queries(self.dialect)
        self.wakeups = Wakeups()
        self.feed = FeedSignals()
        """Journal hints and live feed messages (:mod:`tidings.store.feed`)."""

    @abstractmethod
    async def transact(
        self, unit: Callable[[Tx], T], *, route: str | None = None, durable: bool = True
    ) -> T:
        """Run ``unit`` in a write transaction; return its result once it is durable.

        ``durable=False`` is for a unit whose effect may be lost to a power failure or a crash
        of the database server, and only that: a claim made on its own, whose lost lease leaves
        its signals ready as before, while whatever its holder commits durably later makes the
        claim durable first, or finds no lease; or a webhook's acknowledgement, whose loss sends
        the notification once more (at least once, its id the same). Such a unit may be
        answered once its commit is visible, before the disk has it; a group with any durable
        unit in it commits durably.

        A unit may run more than once before it commits (a transient error, or another unit of
        the same group failing, runs it again in a fresh transaction), so it must only touch the
        database through ``tx`` and keep no other effects.

        ``route`` names what the unit is about (a conversation id): units with the same route
        are committed in the order they were submitted, by one writer, so they never wait on
        each other's locks across writers. Units that touch one conversation should pass it.
        """

    def submit(
        self, unit: Callable[[Tx], T], *, route: str | None = None, durable: bool = True
    ) -> asyncio.Future[T]:
        """Submit ``unit`` as :meth:`transact` does; a future of its outcome, which stands
        whether or not anyone awaits it (cancelling the future only stops the waiting).

        A dialect whose units run on the event loop answers without a task of its own.
        """
        return asyncio.ensure_future(self.transact(unit, route=route, durable=durable))

    async def transact_query(
        self, query: str, *, route: str | None = None, durable: bool = True, **params: Any
    ) -> list[Row]:
        """Run one named query as a transaction of its own; the rows of its last statement.
        ``durable`` as for :meth:`transact`."""
        return await self.transact(
            lambda tx: tx.all(query, **params), route=route, durable=durable
        )

    claims_in_one_statement = False
    """Whether the dialect's ``claim`` query leases the rows it returns (in one statement), so
    that a claim made on its own can run as that query alone."""

    @abstractmethod
    async def read(self, unit: Callable[[Tx], T]) -> T:
        """Run ``unit`` in a read-only snapshot."""

    @abstractmethod
    async def close(self) -> None:
        """Finish queued work, release the instance's liveness hold and close. Idempotent."""

    # -- instance liveness (S9) ----------------------------------------------------------------

    @abstractmethod
    async def hold_instance(self, instance_id: InstanceId) -> None:
        """Hold a liveness mark for this process's instance until close (or death)."""

    @abstractmethod
    def instance_alive(self, tx: Tx, instance_id: InstanceId) -> bool:
        """Whether the process that registered ``instance_id`` still holds its liveness mark."""

    # -- wake-ups ------------------------------------------------------------------------------

    def wake(self, tx: Tx, conversation_id: ConversationId) -> None:
        """Wake this process's listeners for ``conversation_id`` once ``tx`` commits.

        Other processes are woken by the dialect (PostgreSQL: the publish statement's NOTIFY,
        which reaches this process too) or by polling (SQLite).
        """
        tx._woken.add(conversation_id)

    # -- the feed's live messages -------------------------------------------------------------

    feed_reaches_peers = False
    """Whether :meth:`publish_feed` reaches the runtimes of other processes."""

    feed_payload_bytes: int | None = None
    """The largest live message :meth:`publish_feed` carries, in UTF-8 bytes (None: any)."""

    async def publish_feed(self, messages: Sequence[str]) -> None:
        """Send live feed messages to the other processes on this database, in order.

        Nothing to do here: this dialect reaches no other process (its watchers there see
        the journal, by polling). A dialect that does sends them off the event loop; a
        message that cannot be sent is dropped (they are hints).
        """
        return None

    # -- schema --------------------------------------------------------------------------------

    def apply_migrations(self, tx: Tx, where: str) -> None:
        """Apply every migration not yet recorded, in ``tx``, under the migration lock.

        Migrations are additive and idempotent; a database whose ledger is newer than this
        code is refused rather than touched.
        """
        tx.execute("lock_migrations")
        tx.execute("create_migration_ledger")
        applied = {row["version"] for row in tx.all("applied_migrations")}
        migrations = load_migrations(self.dialect)
        newest = max(applied, default=0)
        if newest > len(migrations):
            raise SchemaError(
                f"{where} has schema version {newest}; this tidings knows {len(migrations)}"
            )
        for migration in migrations:
            if migration.version in applied:
                continue
            for statement in migration.statements:
                tx.run_ddl(statement)
            tx.execute("record_migration", version=migration.version, name=migration.name)

    @abstractmethod
    async def describe_schema(self) -> dict[str, Any]:
        """A normalised description of tables, columns, indexes and constraints."""
