"""PostgreSQL's side of a unit of work: its statements, its transaction object and its errors.

- Statements are written with ``:name`` parameters, as on SQLite; :func:`to_psycopg` rewrites
  them once, when the store opens, to psycopg's ``%(name)s`` (``::type`` casts stay).
- :func:`classify` turns a psycopg error into a :class:`~tidings.errors.StoreError` subclass by
  SQLSTATE, never by message text. :func:`transient` says which errors a unit may run again
  after: a serialization failure, a deadlock, a connection lost before ``COMMIT``.
- A :class:`PostgresTx` sends the statements whose answers the unit does not need together,
  in one pipeline, before the next statement that needs an answer or at the end of the unit.
  Inside a writer's group (a :class:`Batch`) they wait longer: until the next statement whose
  answer is needed, or the group's ``COMMIT``; a row count a unit expects is then checked by
  the server (:func:`expecting`), so the check needs no round trip of its own.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import pq

from tidings.errors import (
    ConnectionLostError,
    CorruptDatabaseError,
    DatabaseBusyError,
    DiskFullError,
    IntegrityViolationError,
    ReadOnlyDatabaseError,
    StoreError,
)
from tidings.store import postgres_pipeline as pipeline
from tidings.store.base import Query, Row, Tx

_PARAM = re.compile(r"(?<![:\w]):([A-Za-z_][A-Za-z0-9_]*)")
RETRIES = 3
"""How often a group (or a read) runs again after a transient error."""
TRANSIENT = ("40001", "40P01")  # serialization_failure, deadlock_detected


def to_psycopg(statement: str) -> str:
    """Rewrite ``:name`` parameters to ``%(name)s``, leaving ``::type`` casts alone."""
    return _PARAM.sub(r"%(\1)s", statement.replace("%", "%%"))


def pg_queries(queries: dict[str, Query]) -> dict[str, Query]:
    """The named queries with their statements rewritten for psycopg."""
    return {
        name: Query(name, tuple(to_psycopg(s) for s in q.statements))
        for name, q in queries.items()
    }


def classify(exc: BaseException) -> StoreError:
    """Map a psycopg error to a TidingsError by SQLSTATE class, never by message text."""
    if isinstance(exc, psycopg.OperationalError) and getattr(exc, "sqlstate", None) is None:
        return ConnectionLostError(str(exc))
    sqlstate: str = getattr(exc, "sqlstate", None) or ""
    cls = sqlstate[:2]
    if cls == "08" or sqlstate in ("57P01", "57P02", "57P03"):
        return ConnectionLostError(str(exc), db_code=sqlstate)
    if sqlstate in TRANSIENT or sqlstate == "55P03":
        return DatabaseBusyError(str(exc), db_code=sqlstate)
    if sqlstate in ("53100",):
        return DiskFullError(str(exc), db_code=sqlstate)
    if cls == "23":
        return IntegrityViolationError(str(exc), db_code=sqlstate)
    if sqlstate == "25006":
        return ReadOnlyDatabaseError(str(exc), db_code=sqlstate)
    if cls == "XX":
        return CorruptDatabaseError(str(exc), db_code=sqlstate)
    return StoreError(str(exc), db_code=sqlstate or None)


def transient(exc: BaseException) -> bool:
    """Whether running the work again may succeed: a conflict, or a lost connection."""
    sqlstate = getattr(exc, "sqlstate", None) or ""
    lost = isinstance(exc, psycopg.OperationalError) and (not sqlstate or sqlstate[:2] == "08")
    return lost or sqlstate in TRANSIENT or sqlstate in ("57P01",)


_TUPLES = (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.SINGLE_TUPLE, pq.ExecStatus.TUPLES_CHUNK)


def fetch(cursor: psycopg.Cursor[Row]) -> list[Row]:
    """The rows of the cursor's result; none for a statement that returns no rows. Decided
    from the result's status, as ``cursor.description`` decides it, without building the
    description's column objects (about 20 µs for a row of 30 columns, at every statement)."""
    result = cursor.pgresult
    if result is None or not (result.nfields or result.status in _TUPLES):
        return []
    return cursor.fetchall()


_DML = re.compile(r"\s*(INSERT|UPDATE|DELETE)\b", re.IGNORECASE)
_RETURNING = re.compile(r"\bRETURNING\b", re.IGNORECASE)
_WITH = re.compile(r"\s*WITH\b", re.IGNORECASE)
_MAIN = re.compile(r"(SELECT|INSERT|UPDATE|DELETE|VALUES)\b", re.IGNORECASE)
_WORD = re.compile(r"\w")
_expecting: dict[tuple[str, int], str | None] = {}
EXPECTATION_FAILED = "22012"  # division_by_zero: what an :func:`expecting` statement raises


def expecting(statement: str, expect: int) -> str | None:
    """``statement`` rewritten to fail (division by zero, :data:`EXPECTATION_FAILED`) unless
    its count is exactly ``expect`` -- the rows an INSERT, UPDATE or DELETE changes, the rows
    a statement that starts with its own ``WITH`` returns, as the driver counts them: the check
    runs in the server, in the same round trip. None for a statement that cannot be wrapped so
    (a plain SELECT, say)."""
    key = (statement, expect)
    if key not in _expecting:
        _expecting[key] = _expecting_sql(statement, int(expect))
    return _expecting[key]


def _expecting_sql(statement: str, expect: int) -> str | None:
    check = f"SELECT 1 / (count(*) = {expect})::int FROM tidings_expected"
    if _DML.match(statement) is not None:
        # A row per changed row: the statement's own RETURNING, or one added.
        returning = "" if _RETURNING.search(statement) else " RETURNING 1"
        return f"WITH tidings_expected AS ({statement}{returning}) {check}"
    if _WITH.match(statement) is None:
        return None
    # The statement's own common table expressions stay at the top level (PostgreSQL wants a
    # data-modifying one there); its main statement becomes one more of them.
    main = _main_statement(statement)
    if main is None:
        return None
    body = statement[main:].rstrip().rstrip(";")
    if _DML.match(body) is not None and _RETURNING.search(body) is None:
        body += " RETURNING 1"
    return f"{statement[:main].rstrip()}, tidings_expected AS ({body}) {check}"


def _main_statement(statement: str) -> int | None:
    """Where the main statement of ``WITH ... main`` starts: the first SELECT, INSERT,
    UPDATE, DELETE or VALUES outside every parenthesis, quote and comment."""
    depth, n, end = 0, 0, len(statement)
    while n < end:
        char = statement[n]
        if char in "'\"":
            close = statement.find(char, n + 1)
            while close != -1 and statement[close + 1:close + 2] == char:  # a doubled quote
                close = statement.find(char, close + 2)
            if close == -1:
                return None
            n = close + 1
            continue
        if statement.startswith("--", n):
            n = statement.find("\n", n)
            if n == -1:
                return None
            continue
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif depth == 0 and (n == 0 or not _WORD.match(statement[n - 1])):
            found = _MAIN.match(statement, n)
            if found is not None:
                return n
        n += 1
    return None


_Later = pipeline.Later
_Check = pipeline.Count


class Batch:
    """What a writer's group still has to send: statements whose answers nobody needs (and the
    group's ``BEGIN``). They go to the server with the next statement whose answer is needed,
    or with ``COMMIT``, in one pipeline: one round trip -- straight through libpq where it can
    (:func:`~tidings.store.postgres_pipeline.send`), else in psycopg's pipeline. With nothing
    queued, a statement goes alone, outside pipeline mode (cheaper in the client for the same
    round trip). ``round_trips`` counts the sends: each waits once for the server's answer."""

    def __init__(self, conn: psycopg.Connection[Row]) -> None:
        self._conn = conn
        self.queued: list[_Later] = [(("BEGIN",), {}, None, None)]
        self.round_trips = 0

    def send(
        self, statement: str, params: dict[str, Any] | None = None, *, binary: bool = False,
        also: tuple[str, dict[str, Any]] | None = None,
    ) -> tuple[list[Row], int, list[_Check], list[Row] | None]:
        """Send what is queued, ``statement`` and the read ``also`` (a statement and its
        values) after it; the statement's rows and row count, answered, the row counts of the
        queued statements still to check, and the read's rows (None without one)."""
        self.round_trips += 1
        if not self.queued and also is None:
            cursor = self._conn.execute(statement, params, binary=binary)
            return fetch(cursor), cursor.rowcount, [], None
        queued, self.queued = self.queued, []
        if not binary:
            answer = pipeline.send(self._conn, queued, statement, params,
                                   also=() if also is None else (also,))
            if answer is not None:
                return (answer.rows, answer.rowcount, answer.counts,
                        None if also is None else answer.also[0])
        checks: list[tuple[psycopg.Cursor[Row], int, Callable[[], Exception] | None]] = []
        with self._conn.pipeline():  # leaving it syncs: everything is answered (or raises)
            for statements, later_params, expect, mismatch in queued:
                cursors = [self._conn.execute(st, later_params) for st in statements]
                if expect is not None:
                    checks.append((cursors[-1], expect, mismatch))
            cursor = self._conn.execute(statement, params, binary=binary)
            read = None if also is None else self._conn.execute(also[0], also[1], binary=binary)
        return (fetch(cursor), cursor.rowcount, [(c.rowcount, e, m) for c, e, m in checks],
                None if read is None else fetch(read))


class PostgresTx(Tx):
    """Statements whose answers a unit does not need wait in ``_later`` and go to the server
    together, in one pipeline (one round trip), before the next statement that needs an
    answer or at the end of the unit. In a writer's group (``batch=``) they wait longer: until
    the next statement whose answer is needed, or the group's ``COMMIT``.

    ``round_trips`` counts the times it waited for the server's answer itself (a statement, a
    pipeline); in a writer's group the :class:`Batch` counts them instead."""

    refuses_nul = True  # PostgreSQL's text cannot hold NUL: refused as bad input, not a 503

    def __init__(
        self,
        queries: dict[str, Query],
        conn: psycopg.Connection[Row],
        *,
        binary: bool = False,
        batch: Batch | None = None,
    ) -> None:
        super().__init__(queries)
        self._conn = conn
        self._later: list[_Later] = []
        # Reads take results in binary: no text round trip for numbers, and bytea (result
        # envelopes) arrives as bytes instead of twice its size in hex.
        self._binary = binary
        self._batch = batch
        self.round_trips = 0
        self._ahead: tuple[str, dict[str, Any], str, dict[str, Any]] | None = None
        """A read asked for ahead (:meth:`read_ahead`): its query and values as asked, its
        statement and values as bound -- sent with the next statement that answers."""
        self._ahead_rows: tuple[str, dict[str, Any], list[Row]] | None = None
        """That read's rows, until anything else runs: its query, its values, its rows."""

    def run_ddl(self, statement: str) -> None:
        self.flush()
        self.round_trips += 1
        self._conn.execute(statement)  # no parameters: '%' in DDL stays literal

    def read_ahead(self, query: str, **params: Any) -> None:
        self._ahead_rows = None
        statements = self._statements(query)
        if len(statements) == 1:
            self._ahead = (query, dict(params), statements[0], self._bind(params))

    def all(self, query: str, **params: Any) -> list[Row]:
        ahead, found = self._ahead, self._ahead_rows
        if found is not None and found[0] == query and found[1] == params:
            self._ahead_rows = None
            return found[2]  # read with the statement before it, nothing run since
        if ahead is not None and ahead[0] == query and ahead[1] == params:
            self._ahead = None  # asked for before anything carried it: read now, once
        return super().all(query, **params)

    def _run(self, statement: str, params: dict[str, Any]) -> tuple[list[Row], int]:
        self._ahead_rows = None
        ahead, self._ahead = self._ahead, None
        also = None if ahead is None else (ahead[2], ahead[3])
        if self._batch is None:
            self.flush()
            self.round_trips += 1
            if also is None:
                cursor = self._conn.execute(statement, params, binary=self._binary)
                return fetch(cursor), cursor.rowcount
            with self._conn.pipeline():
                cursor = self._conn.execute(statement, params, binary=self._binary)
                read = self._conn.execute(also[0], also[1], binary=self._binary)
            rows, count = fetch(cursor), cursor.rowcount
            read_rows: list[Row] | None = fetch(read)
        else:  # what the group queued, this unit's writes and this statement: a round trip
            self._batch.queued += self._later
            self._later = []
            rows, count, checks, read_rows = self._batch.send(
                statement, params, binary=self._binary, also=also)
            _check(checks)  # only this unit's: a unit's own checks are made before it ends
        if ahead is not None and read_rows is not None:
            self._ahead_rows = (ahead[0], ahead[1], read_rows)
        return rows, count

    def run_later(
        self,
        query: str,
        *,
        expect: int | None = None,
        mismatch: Callable[[], Exception] | None = None,
        **params: Any,
    ) -> None:
        self._ahead_rows = None  # a read after this write must see it
        statements = self._statements(query)
        if expect is not None and self._batch is not None and len(statements) == 1:
            wrapped = expecting(statements[0], expect)
            if wrapped is not None:  # checked by the server: nothing to wait for here
                statements, expect, mismatch = (wrapped,), None, None
        self._later.append((statements, self._bind(params), expect, mismatch))

    def flush(self) -> None:
        if not self._later:
            return
        later, self._later = self._later, []
        if self._batch is not None:
            self._batch.queued += later
            if any(expect is not None for _, _, expect, _ in later):
                # A row count the server cannot check is this unit's to check, now.
                _, _, checks, _ = self._batch.send("SELECT 1")
                _check(checks)
            return
        self.round_trips += 1  # one statement, or one pipeline
        if len(later) == 1 and len(later[0][0]) == 1:
            (statement,), params, expect, mismatch = later[0]
            _check([(self._conn.execute(statement, params).rowcount, expect, mismatch)])
            return
        sent: list[tuple[psycopg.Cursor[Row], int | None, Callable[[], Exception] | None]] = []
        with self._conn.pipeline():
            for statements, params, expect, mismatch in later:
                cursors = [self._conn.execute(st, params) for st in statements]
                sent.append((cursors[-1], expect, mismatch))
        _check([(cursor.rowcount, expect, mismatch) for cursor, expect, mismatch in sent])


def _check(checks: list[_Check]) -> None:
    for count, expect, mismatch in checks:
        if expect is not None and count != expect:
            if mismatch is not None:
                raise mismatch()
            raise AssertionError(f"a statement changed {count} rows, not {expect}")
