"""SQLite: the embedded default. One file in WAL mode, one writer, group commit on the loop.

SQLite admits one writer at a time and every commit costs an fsync. Units of work therefore run
on the event loop, each in its own SAVEPOINT inside one open ``BEGIN IMMEDIATE`` transaction;
the transaction commits once a pass of the loop adds no more units, and each caller is answered
only after that shared commit is durable. A unit that raises is rolled back to its savepoint and
fails alone; the others commit. Units made ready by the same wake-up (a hundred conversations
answered by one commit) share the next fsync, so the batch size follows the load with no delay
added to gather it, and no thread hand-off is paid on either side of a unit.

When another process holds the write lock, ``BEGIN`` is retried with short pauses (the loop keeps
running) for up to the busy timeout, and the units that arrive meanwhile queue behind it in
order. Reads run on the loop too, in a snapshot of a read-only connection (WAL readers never
block the writer). The WAL is copied back into the database file by a checkpoint on a
connection and thread of its own, never inside a commit on the loop.

Durability: ``synchronous=FULL`` (the default) fsyncs the WAL at every commit, so a committed
unit survives power loss. ``synchronous=NORMAL`` fsyncs only at checkpoints: a crash of the
process loses nothing, but a power loss or OS crash can roll back the commits made since the
last checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import sqlite3
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, TypeVar

from tidings.errors import (
    CorruptDatabaseError,
    DatabaseBusyError,
    DatabasePathError,
    DiskFullError,
    IntegrityViolationError,
    ReadOnlyDatabaseError,
    StoreError,
)
from tidings.store.base import Query, Row, Store, Tx
from tidings.store.jobs import PASS_S, Answerer, Job, committed
from tidings.types import InstanceId

log = logging.getLogger("tidings.store")
T = TypeVar("T")
Synchronous = Literal["FULL", "NORMAL"]

_GATHER_PASSES = 3
"""Passes of the loop a group may wait for more units (each pass must have added one)."""

_CHECKPOINT_CHANGES = 500
"""Rows changed between two checkpoints of the WAL (about SQLite's own default, 1,000 pages)."""

PAGE_SIZE = 1024
"""The page size of a database file tidings creates (bytes)."""

_BUSY = {"SQLITE_BUSY", "SQLITE_LOCKED"}
_FULL = {"SQLITE_FULL"}
_READONLY = {"SQLITE_READONLY"}
_CORRUPT = {"SQLITE_CORRUPT", "SQLITE_NOTADB"}


def classify(exc: sqlite3.Error) -> StoreError:
    """Map an sqlite3 error to a TidingsError by its result code name, never by its text."""
    name = getattr(exc, "sqlite_errorname", None) or ""
    base = "_".join(name.split("_")[:2])  # SQLITE_CONSTRAINT_UNIQUE -> SQLITE_CONSTRAINT
    if base in _BUSY:
        return DatabaseBusyError(str(exc), db_code=name)
    if base in _FULL:
        return DiskFullError(str(exc), db_code=name)
    if base in _READONLY:
        return ReadOnlyDatabaseError(str(exc), db_code=name)
    if base in _CORRUPT:
        return CorruptDatabaseError(str(exc), db_code=name)
    if base == "SQLITE_CONSTRAINT":
        return IntegrityViolationError(str(exc), db_code=name)
    return StoreError(str(exc), db_code=name or None)


def check_path(path: Path) -> None:
    """Refuse, naming the path and the reason, a database file that cannot be opened where it
    was asked for (B7). Directories are never created: a mistyped one must not become a new,
    empty database beside the real one."""
    shown = str(path)
    if path.is_dir():
        raise DatabasePathError(shown, "it is a directory; give the path of a file inside it")
    parent = path.parent
    if not parent.exists():
        raise DatabasePathError(
            shown, f"the directory {str(parent)!r} does not exist (tidings does not create "
            "directories: create it, or correct the path)")
    if not parent.is_dir():
        raise DatabasePathError(shown, f"{str(parent)!r} is not a directory")
    if path.exists():
        if not os.access(path, os.R_OK | os.W_OK):
            raise DatabasePathError(shown, "permission denied: the file is not readable and "
                                    "writable by this user")
    elif not os.access(parent, os.W_OK | os.X_OK):
        raise DatabasePathError(
            shown, f"permission denied: this user cannot create files in {str(parent)!r}")


class SqliteTx(Tx):
    def __init__(self, queries: dict[str, Query], conn: sqlite3.Connection) -> None:
        super().__init__(queries)
        self._conn = conn

    def _adapt_list(self, value: list[Any] | tuple[Any, ...]) -> Any:
        # Lists travel as JSON text and are opened in SQL with json_each().
        return json.dumps(list(value))

    def _run(self, statement: str, params: dict[str, Any]) -> tuple[list[Row], int]:
        cursor = self._conn.execute(statement, params)
        rows = cursor.fetchall() if cursor.description is not None else []
        return rows, cursor.rowcount


def _dict_row(cursor: sqlite3.Cursor, values: tuple[Any, ...]) -> Row:
    return {col[0]: value for col, value in zip(cursor.description, values, strict=True)}


class SqliteStore(Store):
    """A SQLite database file in WAL mode with a group-committing writer thread."""

    dialect = "sqlite"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "FULL",
        busy_timeout_ms: int = 5_000,
        max_group: int = 512,
    ) -> None:
        super().__init__()
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError("synchronous must be FULL or NORMAL")
        self.path = Path(path)
        self.synchronous: Synchronous = synchronous
        self._busy_timeout_ms = busy_timeout_ms
        self._max_group = max_group
        self._loop: asyncio.AbstractEventLoop | None = None
        self._writer: sqlite3.Connection | None = None
        self._reader: sqlite3.Connection | None = None
        self._open = False  # the group's transaction is open on the writer
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
        self._checkpoint_conn: sqlite3.Connection | None = None
        self._checkpointed_at = 0
        self._closed = False
        self._instance_locks: dict[str, int] = {}
        self.groups_committed = 0
        self.units_committed = 0

    # -- opening -------------------------------------------------------------------------------

    def _connect(self, *, readonly: bool = False) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=0
        )
        try:
            conn.row_factory = _dict_row
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA temp_store = MEMORY")
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            if readonly:
                conn.execute("PRAGMA query_only = ON")
        except BaseException:
            conn.close()
            raise
        return conn

    def _open_sync(self) -> None:
        check_path(self.path)
        try:
            conn = self._connect()
        except sqlite3.Error as exc:
            if getattr(exc, "sqlite_errorname", "") == "SQLITE_CANTOPEN":
                raise DatabasePathError(
                    str(self.path), f"SQLite cannot open it ({exc}): check the path, its "
                    "permissions and the file system") from exc
            raise classify(exc) from exc
        try:
            # A new file gets 1 KiB pages (an existing one keeps its own: this is ignored once
            # the file holds a page). A unit writes a few small rows into several tables and
            # indexes; every page it touches is a WAL frame of its commit, and a 4 KiB frame
            # costs more to write and fsync than a 1 KiB one (measured: commits 7-25 % cheaper).
            conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            if mode is None or next(iter(mode.values())).lower() != "wal":
                raise StoreError(f"could not put {self.path} in WAL mode")
            self._migrate(conn)
        except sqlite3.Error as exc:
            conn.close()
            raise classify(exc) from exc
        except BaseException:
            conn.close()
            raise
        try:
            # The writer never waits inside SQLite for another process's lock: that would
            # block the event loop. Its BEGIN is retried instead (see _begin_later). Nor does
            # it checkpoint inside its commits (see _checkpoint_if_due).
            conn.execute("PRAGMA busy_timeout = 0")
            conn.execute("PRAGMA wal_autocheckpoint = 0")
            self._reader = self._connect(readonly=True)
        except sqlite3.Error as exc:
            conn.close()
            raise classify(exc) from exc
        self._writer = conn

    def _migrate(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            self.apply_migrations(SqliteTx(self.queries, conn), str(self.path))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    @classmethod
    async def open(cls, path: str | os.PathLike[str], **options: Any) -> SqliteStore:
        store = cls(path, **options)
        await asyncio.to_thread(store._open_sync)
        return store

    # -- the writer: units run on the event loop, one open transaction per group -------------

    def _loop_for(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif loop is not self._loop:
            raise StoreError("this SQLite store belongs to another event loop")
        return loop

    async def transact(
        self, unit: Callable[[Tx], T], *, route: str | None = None, durable: bool = True
    ) -> T:
        return await self.submit(unit, route=route, durable=durable)

    def submit(
        self, unit: Callable[[Tx], T], *, route: str | None = None, durable: bool = True
    ) -> asyncio.Future[T]:
        # One writer, in submission order: every route is already ordered. The unit runs now,
        # in the caller's step, unless units are waiting already.
        if self._closed:
            raise StoreError("the store is closed")
        loop = self._loop_for()
        future: asyncio.Future[T] = loop.create_future()
        job = Job(unit, loop, future, durable=durable)
        if (not durable and self.synchronous == "FULL" and self._last_group <= 1
                and not self._open and not self._waiting and self._away is None
                and self._alone(job)):
            return future
        try:
            ready = not self._waiting and self._away is None and (
                self._open or self._begin() is None)
        except StoreError as exc:
            future.set_exception(exc)
            return future
        if not ready:
            # The writer is away (a commit or checkpoint on its thread), or another process
            # holds the database: queue behind the units already waiting, loop running on.
            self._waiting.append(job)
            if self._runner is None:
                self._runner = loop.create_task(self._run_waiting())
            return future
        self._run(job)
        self._schedule_commit(loop)
        if job.error is not None:
            future.set_exception(job.error)
        return future

    def _alone(self, job: Job) -> bool:
        """Run a unit that need not be durable (a claim) in a transaction of its own, now,
        committed without waiting for the disk: ``synchronous=NORMAL`` for that commit alone
        (SQLite takes it only between transactions). Only while units come one at a time (the
        last group was one unit): under load a claim joins the group at hand, whose fsync it
        shares, rather than splitting it. The WAL keeps commits in order, so the
        next durable commit's fsync makes it durable too; a crash of this process loses
        nothing (the OS has the WAL), a power failure may lose the claim (its signals are ready
        again). False, having changed nothing, when another process holds the write lock."""
        conn = self._writer
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
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
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
        assert self._writer is not None
        try:
            self._writer.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            error = classify(exc)
            if isinstance(error, DatabaseBusyError):
                return error
            raise error from exc
        self._open = True
        return None

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
        group's commit); on failure it is rolled back alone and ``job.error`` says why. The
        first unit of a transaction runs without a savepoint (two statements fewer: a serial
        caller's every unit); its failure rolls the transaction back, which holds nothing
        else, and the next unit begins another. A later unit runs in a savepoint, so that its
        failure leaves the group's other units in place."""
        conn = self._writer
        assert conn is not None
        tx = SqliteTx(self.queries, conn)
        first = not self._group
        try:
            if not first:
                conn.execute("SAVEPOINT unit")
            job.result = job.unit(tx)
            if not first:
                conn.execute("RELEASE unit")
        except BaseException as exc:
            job.error = classify(exc) if isinstance(exc, sqlite3.Error) else exc
            if job.error is not exc:
                job.error.__cause__ = exc
            try:
                if conn.in_transaction:
                    if first:
                        conn.execute("ROLLBACK")
                    else:
                        conn.execute("ROLLBACK TO unit")
                        conn.execute("RELEASE unit")
            except sqlite3.Error:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            if not conn.in_transaction:
                # The first unit's rollback, or a fatal error (disk full, I/O) that ended the
                # transaction: the units already in it (none after a first unit) are not
                # committed, and learn it now.
                self._open = False
                group, self._group = self._group, []
                if group:
                    self._finish(group, StoreError(
                        "the shared transaction was aborted by a failure"))
            return
        job.took(tx)
        self._group.append(job)

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
        self._last_group = len(group)
        if len(group) <= 1 or self._closed:
            self._finish(group, self._commit_sync())
            return
        away = asyncio.get_running_loop().run_in_executor(self._thread, self._commit_sync)
        self._away = away
        away.add_done_callback(lambda done: self._committed(done, group))

    def _commit_sync(self) -> StoreError | None:
        conn = self._writer
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
            committed(group, self.wakeups, self.feed)
        self._answerer.add(group)
        if error is None:
            self._checkpoint_if_due()

    # -- checkpoints: off the loop, between two groups --------------------------------------------

    def _checkpoint_if_due(self) -> None:
        """Copy the WAL back into the database file from the writer's thread once enough was
        written.

        The writer's automatic checkpoint is off: it would run inside a COMMIT on the event
        loop, copying and fsyncing up to a thousand pages (1.5-3 ms here). Instead a checkpoint
        runs on a connection of its own, on the writer's thread, between two groups: units that
        arrive meanwhile queue (the loop runs on). No unit is written while it runs, so it
        copies the whole WAL and the next group writes the WAL from its start again: a commit
        then overwrites pages the file already has, which costs about half of appending new
        ones (a WAL that only grows makes every fsync carry the file's new size).
        """
        assert self._writer is not None
        changes = self._writer.total_changes
        if (self._away is not None or self._open or self._closed
                or changes - self._checkpointed_at < _CHECKPOINT_CHANGES):
            return
        self._checkpointed_at = changes
        away = asyncio.get_running_loop().run_in_executor(self._thread, self._checkpoint_sync)
        self._away = away
        away.add_done_callback(self._checkpoint_done)

    def _checkpoint_sync(self) -> None:
        if self._checkpoint_conn is None:
            self._checkpoint_conn = self._connect()
        self._checkpoint_conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def _checkpoint_done(self, done: asyncio.Future[None]) -> None:
        self._away = None
        if not done.cancelled() and done.exception() is not None:
            log.warning("WAL checkpoint of %s failed: %s", self.path, done.exception())

    # -- readers: on the loop, in a snapshot of their own ----------------------------------------

    async def read(self, unit: Callable[[Tx], T]) -> T:
        if self._closed:
            raise StoreError("the store is closed")
        self._loop_for()
        conn = self._reader
        assert conn is not None
        try:
            conn.execute("BEGIN")
        except sqlite3.Error as exc:
            raise classify(exc) from exc
        try:
            return unit(SqliteTx(self.queries, conn))
        except sqlite3.Error as exc:
            raise classify(exc) from exc
        finally:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("COMMIT")

    # -- instance liveness: an exclusive flock held on a sidecar file for the process's life --

    def _lock_dir(self) -> Path:
        return self.path.with_name(self.path.name + ".instances")

    async def hold_instance(self, instance_id: InstanceId) -> None:
        folder = self._lock_dir()
        folder.mkdir(exist_ok=True)
        fd = os.open(folder / f"{instance_id}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._instance_locks[instance_id] = fd

    def instance_alive(self, tx: Tx, instance_id: InstanceId) -> bool:
        if instance_id in self._instance_locks:
            return True
        lock_path = self._lock_dir() / f"{instance_id}.lock"
        try:
            fd = os.open(lock_path, os.O_RDWR)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True  # another process holds it: that instance is running
        finally:
            os.close(fd)  # closing drops our lock, if we took it
        with contextlib.suppress(FileNotFoundError):
            lock_path.unlink()
        return False

    # -- closing -------------------------------------------------------------------------------

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        while True:  # let queued units run and the writer come back
            pending: asyncio.Future[Any] | None = self._runner or self._away
            if pending is None:
                break
            await self._wait_for(pending)
        if self._writer is not None and self._open:
            self._commit()
        self._answerer.flush()  # every caller learns its outcome now, not in later passes
        self._thread.shutdown(wait=True)
        for conn in (self._checkpoint_conn, self._reader, self._writer):
            if conn is not None:
                conn.close()
        for instance_id, fd in self._instance_locks.items():
            with contextlib.suppress(FileNotFoundError):
                (self._lock_dir() / f"{instance_id}.lock").unlink()
            os.close(fd)
        self._instance_locks.clear()

    # -- schema --------------------------------------------------------------------------------

    async def describe_schema(self) -> dict[str, Any]:
        return await asyncio.to_thread(describe_sqlite_schema, self.path)


def describe_sqlite_schema(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Tables, columns, indexes (with predicates) and foreign keys, normalised for comparison."""
    conn = sqlite3.connect(path)
    try:
        described: dict[str, Any] = {}
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite_%' AND name != 'schema_migrations' ORDER BY name"
            )
        ]
        for table in tables:
            columns = [
                (r[1], r[2].upper(), bool(r[3]), r[4], r[5])
                for r in conn.execute(f"PRAGMA table_xinfo('{table}')")
            ]
            fks = sorted(
                (r[2], r[3], r[4], r[6])
                for r in conn.execute(f"PRAGMA foreign_key_list('{table}')")
            )
            described[f"table {table}"] = {"columns": columns, "foreign_keys": fks}
        for name, table, sql in conn.execute(
            "SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'index' "
            "AND name NOT LIKE 'sqlite_%' ORDER BY name"
        ):
            described[f"index {name}"] = {"table": table, "sql": " ".join(sql.split())}
        for name, table in conn.execute(
            "SELECT name, tbl_name FROM sqlite_master WHERE type = 'index' "
            "AND name LIKE 'sqlite_autoindex_%' ORDER BY name"
        ):
            cols = [r[2] for r in conn.execute(f"PRAGMA index_info('{name}')")]
            described[f"unique {table}({','.join(cols)})"] = True
        return described
    finally:
        conn.close()
