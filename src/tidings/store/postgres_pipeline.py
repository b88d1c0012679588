"""A writer group's round trips sent through libpq: what the group queued, then one statement.

psycopg's pipeline mode sends each statement the moment it is executed: per statement, a wait
for the socket, a write to it and a look for answers -- 35-80 µs of the writer's CPU, under the
interpreter lock, on these machines. A writer group queues the writes whose answers nobody
reads and sends them with the next statement whose answer a unit needs (the next unit's locked
read) or with ``COMMIT``: under load a round trip carries a dozen statements per turn.
:func:`send` puts them all in libpq's buffer as prepared statements (each prepared once per
connection, in the same pipeline the first time), flushes the buffer in one write and waits
once for the answers: a few µs per statement. The round trips, the statements and what they do
are psycopg's, and so are the rows (loaded by the connection's own loaders) and every error
(built from the server's answer as psycopg builds it).

It takes what the store binds after :meth:`~tidings.store.base.Tx._bind`: text, integers,
booleans, finite floats, bytes and NULL. Anything else -- a list, an enum, a value it does not
know -- and the round trip goes through psycopg's pipeline as before, as does every statement
whose preparation the server once refused here.
"""

from __future__ import annotations

import math
import re
import select
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import pq
from psycopg.adapt import Transformer
from psycopg.errors import error_from_result

_PLACEHOLDER = re.compile(r"%\(([A-Za-z_][A-Za-z0-9_]*)\)s|%%")
_INT8, _BOOL, _FLOAT8, _BYTEA, _UNKNOWN = 20, 16, 701, 17, 0
Later = tuple[tuple[str, ...], dict[str, Any], int | None, Callable[[], Exception] | None]
"""Statements queued in a group: their texts, their bound values, the row count the last
must change (None: none checked here) and the error to raise when it does not."""
Count = tuple[int, int | None, Callable[[], Exception] | None]
"""A row count a statement changed, with the count expected and the error for a mismatch."""


@dataclass(frozen=True, slots=True)
class _Statement:
    text: bytes  # with $1, $2 ... for psycopg's %(name)s, one number per name
    names: tuple[str, ...]


_Key = tuple[bytes, tuple[int, ...]]  # a statement's text and its parameters' types


class _Prepared:
    """What one connection has prepared: a name per statement and types, and the next name."""

    def __init__(self) -> None:
        self.names: dict[_Key, bytes] = {}
        self.made = 0

    def new_name(self) -> bytes:
        self.made += 1
        return f"tidings_w{self.made}".encode("ascii")


_statements: dict[str, _Statement] = {}
_refused: set[str] = set()  # statements the server would not prepare here: psycopg sends them
_prepared: weakref.WeakKeyDictionary[pq.abc.PGconn, _Prepared] = weakref.WeakKeyDictionary()


def forget(conn: psycopg.Connection[Any]) -> None:
    """What was prepared on ``conn`` may be gone: psycopg deallocates every prepared statement
    of the connection, ours too, once a ``ROLLBACK`` ran through it while it had prepared some
    of its own. The next send prepares again, under names never used on the connection (those
    still there, if psycopg had none, stay unused)."""
    prepared = _prepared.get(conn.pgconn)
    if prepared is not None:
        prepared.names.clear()


def _statement(psycopg_text: str) -> _Statement:
    found = _statements.get(psycopg_text)
    if found is None:
        names: list[str] = []

        def number(match: re.Match[str]) -> str:
            name = match.group(1)
            if name is None:
                return "%"  # psycopg's %% is a literal %
            if name not in names:
                names.append(name)
            return f"${names.index(name) + 1}"

        text = _PLACEHOLDER.sub(number, psycopg_text)
        found = _statements[psycopg_text] = _Statement(text.encode("utf-8"), tuple(names))
    return found


def _value(value: Any) -> tuple[bytes | None, int, int] | None:
    """A bound value as libpq takes it -- its bytes, its type, its format (1: binary) -- or None
    when this path does not take it. Text goes untyped, as psycopg sends it: the server takes
    its type from where it stands."""
    cls = value.__class__
    if value is None:
        return None, _UNKNOWN, 0
    if cls is str:
        try:
            return value.encode("utf-8"), _UNKNOWN, 0
        except UnicodeEncodeError:
            return None  # a lone surrogate: psycopg's dumper says so, as it always did
    if cls is int:
        return str(value).encode("ascii"), _INT8, 0
    if cls is bool:
        return (b"t" if value else b"f"), _BOOL, 0
    if cls is float and math.isfinite(value):
        return repr(value).encode("ascii"), _FLOAT8, 0
    if cls is bytes:
        return value, _BYTEA, 1
    return None


_Planned = tuple[str, _Statement, list[bytes | None], list[int], tuple[int, ...], int | None,
                 Callable[[], Exception] | None]


def _plan(queued: Sequence[Later]) -> list[_Planned] | None:
    """Each statement of ``queued`` with its values as libpq takes them, and, on the last of
    an item that expects a row count, that expectation; None when this path does not take
    them all."""
    planned: list[_Planned] = []
    for statements, params, expect, mismatch in queued:
        for position, text in enumerate(statements):
            if text in _refused:
                return None
            statement = _statement(text)
            values: list[bytes | None] = []
            formats: list[int] = []
            types: list[int] = []
            for name in statement.names:
                if name not in params:
                    return None  # psycopg says what is missing
                taken = _value(params[name])
                if taken is None:
                    return None
                values.append(taken[0])
                types.append(taken[1])
                formats.append(taken[2])
            last = position == len(statements) - 1
            planned.append((text, statement, values, formats, tuple(types),
                            expect if last else None, mismatch if last else None))
    return planned


@dataclass(frozen=True, slots=True)
class Answer:
    """What :func:`send` brings back: the statement's rows and row count, the row count of each
    queued write that expects one, in order, with its expectation, and the rows of each read
    sent after the statement (``also``), in order."""

    rows: list[dict[str, Any]]
    rowcount: int
    counts: list[Count]
    also: list[list[dict[str, Any]]]


def send(
    conn: psycopg.Connection[Any], queued: Sequence[Later], statement: str,
    params: dict[str, Any] | None, *, also: Sequence[tuple[str, dict[str, Any]]] = (),
    then: str | None = None,
) -> Answer | None:
    """Send ``queued`` (statements whose answers nobody reads, but a row count some expect),
    then ``statement`` and the reads of ``also`` (each a statement and its values, answered
    too) in one pipeline -- and ``then`` after them, a statement without values whose answer
    is only checked (a ``COMMIT``) -- and wait for every answer. None, having sent nothing,
    when psycopg must send them (see the module); raises psycopg's error for the first
    statement the server refused, or for a connection that failed."""
    after: list[Later] = [] if then is None else [((then,), {}, None, None)]
    answered: list[Later] = [((text,), values, None, None)
                             for text, values in ((statement, params or {}), *also)]
    planned = _plan([*queued, *answered, *after])
    if planned is None or conn.info.encoding != "utf-8":
        return None
    pgconn = conn.pgconn
    prepared = _prepared.setdefault(pgconn, _Prepared())
    preparing: dict[_Key, tuple[int, str, bytes]] = {}  # prepared in this pipeline: its answer
    counted: list[Count] = []  # the answer's index (a count once answered), as expected
    sent = 0  # the answers to wait for, one per query sent
    at: list[int] = []  # each planned statement's answer (a preparation's comes before it)
    pgconn.enter_pipeline_mode()
    try:
        for text, planned_statement, values, formats, types, expect, mismatch in planned:
            if not planned_statement.names:
                pgconn.send_query_params(planned_statement.text, None)
            else:
                key = (planned_statement.text, types)
                name = prepared.names.get(key)
                if name is None and key in preparing:
                    name = preparing[key][2]
                if name is None:
                    name = prepared.new_name()
                    pgconn.send_prepare(name, planned_statement.text, param_types=types)
                    preparing[key] = (sent, text, name)
                    sent += 1
                pgconn.send_query_prepared(name, values, param_formats=formats)
            at.append(sent)
            if expect is not None:
                counted.append((sent, expect, mismatch))
            sent += 1
        pgconn.pipeline_sync()
        _flush(pgconn)
        answers = _answers(pgconn)
    except BaseException:
        conn.close()  # mid-pipeline: no state this connection could be trusted in again
        raise
    pgconn.exit_pipeline_mode()
    if len(answers) != sent:
        conn.close()
        raise psycopg.OperationalError(f"{len(answers)} answers to {sent} statements")
    for key, (index, text, name) in preparing.items():
        if answers[index].status == pq.ExecStatus.COMMAND_OK:
            prepared.names[key] = name
        elif answers[index].status == pq.ExecStatus.FATAL_ERROR:
            _refused.add(text)
    for answer in answers:
        if answer.status == pq.ExecStatus.FATAL_ERROR:
            raise error_from_result(answer, encoding="utf-8")
    first = len(at) - len(after) - len(answered)  # the statement's, then the reads'
    reads = [answers[index] for index in at[first:first + len(answered)]]
    return Answer(_rows(conn, reads[0]), _count(reads[0]),
                  [(_count(answers[index]), expect, mismatch)
                   for index, expect, mismatch in counted],
                  [_rows(conn, read) for read in reads[1:]])


def _count(answer: pq.abc.PGresult) -> int:
    tuples = answer.command_tuples
    return -1 if tuples is None else tuples


def _rows(conn: psycopg.Connection[Any], answer: pq.abc.PGresult) -> list[dict[str, Any]]:
    """The rows of a statement's answer as the connection's cursors load them (its loaders,
    a dict per row); none for a statement that returns no rows."""
    if not answer.nfields:
        return []
    names = [(answer.fname(n) or b"").decode("utf-8") for n in range(answer.nfields)]
    loading = Transformer.from_context(conn)
    loading.set_pgresult(answer)

    def row(values: Sequence[Any]) -> dict[str, Any]:
        return dict(zip(names, values, strict=True))

    return loading.load_rows(0, answer.ntuples, row)


def _flush(pgconn: pq.abc.PGconn) -> None:
    """Write libpq's buffer out. While the socket will not take more, the server's answers so
    far are read into libpq's buffer: a server whose own writes to us are blocked stops reading
    what we send, and neither side would move again."""
    while pgconn.flush():
        if _wait(pgconn.socket, select.POLLOUT | select.POLLIN) & select.POLLIN:
            pgconn.consume_input()


def _answers(pgconn: pq.abc.PGconn) -> list[pq.abc.PGresult]:
    """Every answer up to the pipeline's sync, in the order the queries were sent."""
    answers: list[pq.abc.PGresult] = []
    while True:
        while pgconn.is_busy():
            _wait(pgconn.socket, select.POLLIN)
            pgconn.consume_input()
        result = pgconn.get_result()
        if result is None:
            continue  # the end of one query's answers
        if result.status == pq.ExecStatus.PIPELINE_SYNC:
            while pgconn.notifies() is not None:
                pass  # a writer listens to nothing
            return answers
        answers.append(result)


def _wait(fd: int, events: int) -> int:
    """Wait until the socket is ready for ``events``; what it is ready for (an error or a
    hang-up counts as readable: libpq's next read reports it)."""
    poller = select.poll()
    poller.register(fd, events)
    ready = 0
    for _, happened in poller.poll():
        ready |= happened
    if ready & (select.POLLERR | select.POLLHUP | select.POLLNVAL):
        ready |= select.POLLIN
    return ready


__all__ = ("Answer", "Count", "Later", "send")
