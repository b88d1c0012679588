"""The floor, measured on this machine in the same run: each figure the goals name, done by
hand on tidings' own schema, with nothing of the runtime around it.

    python bench/floor.py [--quick] [--backend sqlite|postgres|both] [--postgres-dsn DSN]
                          [--only turn,cpu,wake,e2e1,e2e100]

Every scratch database is built by tidings' migrations (SQLite's 1 KiB pages included) and its
conversations are made by tidings; then only hand-written SQL runs on a plain connection.

* **turn** -- what a serial turn of ``bench/turns.py`` writes, row for row, in two units:
  *begin* (durable before the model is called): the conversation's counters and slot taken with
  one ``UPDATE ... RETURNING``; the person's input; the run; two journal rows. *end*: the
  counters and slot given back with one ``UPDATE ... RETURNING``; the input marked read; the
  person's message and the answer; the run ended; its usage; four journal rows. One
  transaction each: SQLite ``BEGIN IMMEDIATE`` ... ``COMMIT`` at synchronous=FULL; PostgreSQL a
  warm connection, the counters in one round trip and the rest pipelined with ``COMMIT``.
  Beside it, the raw single-row commit, before and after.
* **cpu** -- 100 conversations at once, each starting its next turn (the same two units) as
  soon as its last one ended, on one event loop: this process's CPU time per turn over a
  window after a warm-up. SQLite: every unit on the loop inside one open transaction, a
  savepoint each, ``COMMIT`` once the loop has run what was ready (concurrent units share the
  fsync; a unit's caller waits for it). PostgreSQL: 16 warm ``AsyncConnection``s on the loop, a
  conversation routed to one; the units waiting for a connection go as one pipelined
  transaction (``BEGIN``, each unit's first statement, one round trip for their answers, the
  writes and ``COMMIT``), so they share the commit. Units per commit under ``figures``.
* **wake** -- one background process at a time (``sleep 0.05``, started by asyncio): from the
  moment ``wait()`` returns, where tidings' supervisor stamps the exit, to the commit of one
  unit that ends the task and begins the conversation's next turn (counters and slot taken, the
  task's result as its input, the run, two journal rows); then the model would be called.
* **e2e1** -- the outbox, one conversation, serially: publish (the queue's counters by upsert,
  the event; SQLite's trigger writes the delivery), claim one (read, then leased by its
  sequence span), consume it (the ack, all or nothing by its row count, the queue's head and
  backlog, one operation row). SQLite: the units of *cpu*'s design, the claim not waiting for
  a commit of its own (a lease lost to a power failure leaves its signals ready): two commits
  per message. PostgreSQL: each unit one statement (CTEs), alone its own transaction in
  autocommit, with others grouped as in *cpu*.
* **e2e100** -- the same at 100 conversations: a producer per conversation (100 publishes in
  flight), 16 consumers, a conversation due when a publish finds its queue was empty, one
  consumer at a time claiming up to 16 of it until a claim comes back empty.

Keys (``sqlite_`` and ``pg_``): ``*_floor_turn_us`` (p50 of begin + end), ``*_floor_begin_us``,
``*_floor_end_us``, ``*_raw_commit_p50_us``, ``*_floor_cpu_per_turn_us_100``,
``*_floor_tps_100``, ``*_floor_wake_us`` (p50), ``*_floor_e2e_1_msgs``,
``*_floor_e2e_100_msgs`` (messages per second), ``*_floor_cpu_per_msg_us_100``; every step's
figures under ``figures``, a failed step under ``errors`` (exit status 1; the others still
run). Progress goes to stderr; stdout ends with one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import re
import resource
import sqlite3
import statistics
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from harness import (
    DEFAULT_DSN,
    log,
    raw_pg_commit_us,
    raw_sqlite_commit_us,
    run_main,
    scratch_url,
    source_revision,
)

import tidings
from tidings import Profile, ScriptedModel

OWNER = "bench"
CLAIM_COUNT = 16


@dataclass(frozen=True)
class Plan:
    turns: int  # serial floor turns (50 more warm up)
    raw_s: float  # each raw commit measurement (before and after), seconds
    conversations: int  # at once, for the CPU per turn and e2e_100
    cpu_warmup_s: float
    cpu_window_s: float
    wake_samples: int
    e2e1_warmup: int
    e2e1_seconds: float
    e2e100_warmup: int
    e2e100_messages: int
    e2e_in_flight: int = 100  # publishes at once at 100 conversations
    e2e_consumers: int = 16
    pg_connections: int = 16  # warm connections at 100 conversations, a conversation to one


QUICK = Plan(turns=1000, raw_s=1.0, conversations=100, cpu_warmup_s=1.0, cpu_window_s=3.0,
             wake_samples=60, e2e1_warmup=100, e2e1_seconds=3.0, e2e100_warmup=2000,
             e2e100_messages=10000)
FULL = Plan(turns=5000, raw_s=3.0, conversations=100, cpu_warmup_s=2.0, cpu_window_s=10.0,
            wake_samples=300, e2e1_warmup=300, e2e1_seconds=10.0, e2e100_warmup=5000,
            e2e100_messages=40000)

TAKE = (
    "UPDATE conversations SET queued_inputs = queued_inputs + 1,"
    " last_queue_position = last_queue_position + 1, last_event_seq = last_event_seq + 2,"
    " slot_token = :token, slot_deadline_us = :deadline, slot_instance = :instance,"
    " slot_run = :run, updated_at_us = :now WHERE conversation_id = :conv"
    " RETURNING last_queue_position, last_event_seq, last_message_seq"
)
INPUT = (
    "INSERT INTO inputs (input_id, conversation_id, queue_position, origin, kernel, author_kind,"
    " author_handle, author_display_name, delivery_mode, content, meta, state, accepted_at_us)"
    " VALUES (:input, :conv, :position, 'person', 0, 'human', 'person', '', 'queue', :words,"
    " '{}', 'queued', :now)"
)
RUN = (
    "INSERT INTO runs (run_id, conversation_id, trigger, status, instance_id, created_at_us,"
    " started_at_us) VALUES (:run, :conv, 'person', 'running', :instance, :now, :now)"
)
EVENTS = "INSERT INTO events (conversation_id, seq, type, run_id, data, at_us) VALUES "
GIVE = (
    "UPDATE conversations SET queued_inputs = queued_inputs - 1,"
    " last_message_seq = last_message_seq + 2, last_event_seq = last_event_seq + 4,"
    " slot_token = NULL, slot_deadline_us = NULL, slot_instance = NULL, slot_run = NULL,"
    " updated_at_us = :now WHERE conversation_id = :conv AND slot_token = :token"
    " RETURNING last_message_seq, last_event_seq"
)
READ = (
    "UPDATE inputs SET state = 'materialized', run_id = :run, materialized_at_us = :now,"
    " message_seq = :seq WHERE input_id = :input AND state = 'queued'"
)
MESSAGES = (
    "INSERT INTO messages (conversation_id, seq, message_id, run_id, role, content, origin,"
    " input_id, meta, created_at_us) VALUES"
    " (:conv, :seq, :m1, :run, 'user', :words, 'person', :input, :meta1, :now),"
    " (:conv, :seq2, :m2, :run, 'assistant', :words, NULL, NULL, :meta2, :now)"
)
END = (
    "UPDATE runs SET status = 'completed', model = 'scripted', steps = 1, ended_at_us = :now"
    " WHERE run_id = :run AND status IN ('queued', 'running')"
)
USAGE = (
    "INSERT INTO run_usage (conversation_id, run_id, model_calls, input_tokens, output_tokens,"
    " cache_read_tokens, cache_write_tokens) VALUES (:conv, :run, 1, 11, 2, 0, 0)"
)


def events(count: int) -> str:
    rows = ", ".join(f"(:conv, :e{n}, :t{n}, :run, :d{n}, :now)" for n in range(count))
    return EVENTS + rows


EVENTS_2, EVENTS_4 = events(2), events(4)


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class Turn:
    """The parameters of one turn and the SQL of its two units, for either dialect."""

    def __init__(self, conv: str, instance: str, n: int) -> None:
        now = time.time_ns() // 1000
        self.p: dict[str, Any] = {
            "conv": conv, "instance": instance, "now": now, "deadline": now + 30_000_000,
            "token": uuid.uuid4().hex, "run": new_id("run"), "input": new_id("in"),
            "words": f"message {n}", "m1": new_id("msg"), "m2": new_id("msg"),
            "meta1": '{"authored_by":{"kind":"human","handle":"person","display_name":""}}',
            "meta2": '{"model":"scripted","step":1}',
        }

    def begun(self, taken: tuple[int, int, int]) -> dict[str, Any]:
        position, event_seq, _ = taken
        p = self.p
        return {**p, "position": position,
                "e0": event_seq - 1, "t0": "input_accepted",
                "d0": json.dumps({"input_id": p["input"], "origin": "person",
                                  "queue_position": position, "delivery_mode": "queue"}),
                "e1": event_seq, "t1": "turn_status",
                "d1": json.dumps({"run_public_id": p["run"], "status": "running",
                                  "trigger": "person", "inputs": [p["input"]]})}

    def ended(self, given: tuple[int, int]) -> dict[str, Any]:
        message_seq, event_seq = given
        p = self.p
        first = event_seq - 3
        return {**p, "seq": message_seq - 1, "seq2": message_seq,
                "e0": first, "t0": "message_committed",
                "d0": json.dumps({"message_seq": message_seq - 1}),
                "e1": first + 1, "t1": "input_materialized",
                "d1": json.dumps({"input_id": p["input"], "run_public_id": p["run"],
                                  "message_seq": message_seq - 1}),
                "e2": first + 2, "t2": "message_committed",
                "d2": json.dumps({"message_seq": message_seq}),
                "e3": first + 3, "t3": "turn_status",
                "d3": json.dumps({"run_public_id": p["run"], "status": "completed"})}


BEGIN_WRITES = (INPUT, RUN, EVENTS_2)
END_WRITES = (READ, MESSAGES, END, USAGE, EVENTS_4)
Fill = Callable[[Any], dict[str, Any] | None]


def sqlite_unit(conn: sqlite3.Connection, counters: str, params: dict[str, Any], fill: Fill,
                writes: tuple[str, ...]) -> float:
    """One unit: the counters with ``RETURNING``, then the writes their values fill in."""
    t0 = time.perf_counter()
    conn.execute("BEGIN IMMEDIATE")
    sqlite_body(conn, counters, params, fill, writes, first=True)
    conn.execute("COMMIT")
    return time.perf_counter() - t0


def sqlite_body(conn: sqlite3.Connection, counters: str, params: dict[str, Any], fill: Fill,
                writes: tuple[str, ...], *, first: bool = False) -> None:
    """A unit's statements: ``fill`` gets the counters' row (``first``) or rows, and returns
    the writes' parameters, or None to write nothing."""
    cursor = conn.execute(counters, params)
    filled = fill(cursor.fetchone() if first else cursor.fetchall())
    if filled is not None:
        for statement in writes:
            conn.execute(statement, filled)


def pg_unit(conn: psycopg.Connection[Any], counters: str, params: dict[str, Any], fill: Fill,
            writes: tuple[str, ...]) -> float:
    """The same on PostgreSQL: the counters in one round trip, the writes with ``COMMIT``."""
    t0 = time.perf_counter()
    with conn.pipeline() as pipe:
        conn.execute("BEGIN")
        cursor = conn.execute(pg(counters), params)
        pipe.sync()
        filled = fill(cursor.fetchone())
        for statement in writes if filled is not None else ():
            conn.execute(pg(statement), filled)
        conn.execute("COMMIT")
    return time.perf_counter() - t0


def sqlite_turn(conn: sqlite3.Connection, conv: str, instance: str, n: int) -> tuple[float, float]:
    turn = Turn(conv, instance, n)
    return (sqlite_unit(conn, TAKE, turn.p, turn.begun, BEGIN_WRITES),
            sqlite_unit(conn, GIVE, turn.p, turn.ended, END_WRITES))


def pg_turn(conn: psycopg.Connection[Any], conv: str, instance: str, n: int) -> tuple[float, float]:
    turn = Turn(conv, instance, n)
    return (pg_unit(conn, TAKE, turn.p, turn.begun, BEGIN_WRITES),
            pg_unit(conn, GIVE, turn.p, turn.ended, END_WRITES))


_PG: dict[str, str] = {}


def pg(statement: str) -> str:
    """``:name`` placeholders as psycopg's ``%(name)s`` (``::`` casts left alone)."""
    if statement not in _PG:
        _PG[statement] = re.sub(r"(?<!:):(\w+)", r"%(\1)s", statement)
    return _PG[statement]


async def conversation(url: str) -> tuple[str, str]:
    """A conversation made by tidings (the schema and its row as the runtime writes them)."""
    async with tidings.open(url, models=[ScriptedModel()]) as rt:
        made = await rt.create_conversation(OWNER, Profile(model="scripted"))
        instance = rt.instance_id
    return made.conversation_id, instance


def measure(turn: Callable[[int], tuple[float, float]], turns: int) -> dict[str, float]:
    for n in range(min(50, turns)):
        turn(n)
    begins: list[float] = []
    ends: list[float] = []
    totals: list[float] = []
    for n in range(turns):
        begin, end = turn(n)
        begins.append(begin)
        ends.append(end)
        totals.append(begin + end)
    return {"turn_p50_us": statistics.median(totals) * 1e6,
            "begin_p50_us": statistics.median(begins) * 1e6,
            "end_p50_us": statistics.median(ends) * 1e6, "turns": turns}


async def bench_sqlite(turns: int, raw_s: float) -> dict[str, Any]:
    async with scratch_url("sqlite", "", "floor") as url:
        conv, instance = await conversation(url)
        conn = sqlite3.connect(url, isolation_level=None)
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        try:
            raw = [raw_sqlite_commit_us(raw_s)]
            figures = measure(lambda n: sqlite_turn(conn, conv, instance, n), turns)
            raw.append(raw_sqlite_commit_us(raw_s))
        finally:
            conn.close()
    return {**figures, "raw_commit_p50_us": statistics.mean(raw)}


async def bench_postgres(dsn: str, turns: int, raw_s: float) -> dict[str, Any]:
    async with scratch_url("postgres", dsn, "floor") as url:
        conv, instance = await conversation(url)
        with psycopg.connect(url, autocommit=True) as conn:
            raw = [raw_pg_commit_us(url, raw_s)]
            figures = measure(lambda n: pg_turn(conn, conv, instance, n), turns)
            raw.append(raw_pg_commit_us(url, raw_s))
    return {**figures, "raw_commit_p50_us": statistics.mean(raw)}


# -- many conversations at once: units grouped into shared commits ------------------------------


class SqliteGroups:
    """The floor's SQLite design for concurrent units: every unit runs on the event loop inside
    one open transaction, a savepoint each, and ``COMMIT`` runs once the loop has run every
    callback that was ready when the first unit of the group ended (``call_soon``), so the
    units that are ready together share one fsync. A durable unit's caller waits for that
    commit; a unit that need not be durable (a claim) does not wait. The commit blocks the loop:
    the cost this design has to bound."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.open = False
        self.scheduled = False
        self.waiting: list[asyncio.Future[None]] = []
        self.units = 0
        self.commits = 0

    async def unit(self, counters: str, params: dict[str, Any], fill: Fill,
                   writes: tuple[str, ...], *, durable: bool = True, first: bool = False) -> None:
        conn = self.conn
        if not self.open:
            conn.execute("BEGIN IMMEDIATE")
            self.open = True
        conn.execute("SAVEPOINT unit")
        try:
            sqlite_body(conn, counters, params, fill, writes, first=first)
        except BaseException:
            conn.execute("ROLLBACK TO unit")
            conn.execute("RELEASE unit")
            raise
        conn.execute("RELEASE unit")
        self.units += 1
        loop = asyncio.get_running_loop()
        if not self.scheduled:
            self.scheduled = True
            loop.call_soon(self.commit)
        if durable:
            done: asyncio.Future[None] = loop.create_future()
            self.waiting.append(done)
            await done

    def commit(self) -> None:
        self.scheduled = False
        waiting, self.waiting = self.waiting, []
        failed: Exception | None = None
        if self.open:
            self.open = False
            try:
                self.conn.execute("COMMIT")
                self.commits += 1
            except sqlite3.Error as exc:  # the group's units fail with it
                failed = exc
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
        for done in waiting:
            if done.done():
                continue
            if failed is None:
                done.set_result(None)
            else:
                done.set_exception(failed)


@dataclass
class PgUnit:
    counters: str
    params: dict[str, Any]
    fill: Fill
    writes: tuple[str, ...]
    durable: bool
    first: bool
    done: asyncio.Future[None]


class PgGroups:
    """The floor's PostgreSQL design for concurrent units: warm ``AsyncConnection``s on the
    loop, a conversation routed to one of them. The units waiting for a connection go together
    as one pipelined transaction: ``BEGIN``, every unit's first statement, one round trip for
    their answers, then every unit's writes and ``COMMIT`` in the same pipeline, so they share
    the commit (a group of units that need not be durable sets ``synchronous_commit = off``).
    A group that fails fails each of its units."""

    def __init__(self, conns: list[psycopg.AsyncConnection[Any]]) -> None:
        self.conns = conns
        self.queues: list[list[PgUnit]] = [[] for _ in conns]
        self.kicks = [asyncio.Event() for _ in conns]
        self.workers = [asyncio.create_task(self.work(n)) for n in range(len(conns))]
        self.units = 0
        self.commits = 0

    async def unit(self, route: int, counters: str, params: dict[str, Any], fill: Fill,
                   writes: tuple[str, ...], *, durable: bool = True,
                   first: bool = False) -> None:
        n = route % len(self.conns)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.queues[n].append(PgUnit(counters, params, fill, writes, durable, first, done))
        self.kicks[n].set()
        await done

    async def work(self, n: int) -> None:
        while True:
            await self.kicks[n].wait()
            self.kicks[n].clear()
            group, self.queues[n] = self.queues[n], []
            if not group:
                continue
            try:
                await self.run(self.conns[n], group)
            except Exception as exc:
                for unit in group:
                    if not unit.done.done():
                        unit.done.set_exception(exc)
            else:
                for unit in group:
                    if not unit.done.done():
                        unit.done.set_result(None)

    async def run(self, conn: psycopg.AsyncConnection[Any], group: list[PgUnit]) -> None:
        writes = any(unit.writes for unit in group)
        if len(group) == 1 and group[0].durable and not writes:  # a transaction of its own
            unit = group[0]
            rows = await (await conn.execute(pg(unit.counters), unit.params)).fetchall()
            unit.fill(rows[0] if unit.first else rows)
            self.units += 1
            self.commits += 1
            return
        async with conn.pipeline() as pipe:
            await conn.execute("BEGIN")
            if not any(unit.durable for unit in group):
                await conn.execute("SET LOCAL synchronous_commit = off")
            cursors = [await conn.execute(pg(unit.counters), unit.params) for unit in group]
            if not writes:  # statements only: one round trip with the commit
                await conn.execute("COMMIT")
            await pipe.sync()
            for unit, cursor in zip(group, cursors, strict=True):
                rows = await cursor.fetchall()
                filled = unit.fill(rows[0] if unit.first else rows)
                for statement in unit.writes if filled is not None else ():
                    await conn.execute(pg(statement), filled)
            if writes:
                await conn.execute("COMMIT")
        self.units += len(group)
        self.commits += 1

    async def close(self) -> None:
        for worker in self.workers:
            worker.cancel()
        await asyncio.gather(*self.workers, return_exceptions=True)


#: One unit of either design: (route, counters, params, fill, writes, durable, first).
Unit = Callable[[int, str, dict[str, Any], Fill, tuple[str, ...], bool, bool], Awaitable[None]]


def sqlite_units(groups: SqliteGroups) -> Unit:
    async def unit(route: int, counters: str, params: dict[str, Any], fill: Fill,
                   writes: tuple[str, ...], durable: bool, first: bool) -> None:
        await groups.unit(counters, params, fill, writes, durable=durable, first=first)
    return unit


def pg_units(routes: PgGroups) -> Unit:
    async def unit(route: int, counters: str, params: dict[str, Any], fill: Fill,
                   writes: tuple[str, ...], durable: bool, first: bool) -> None:
        await routes.unit(route, counters, params, fill, writes, durable=durable, first=first)
    return unit


@contextlib.asynccontextmanager
async def units_on(backend: str, url: str, connections: int) -> AsyncIterator[
        tuple[Unit, Callable[[], int | None]]]:
    """The unit runner of ``backend``'s design on ``url``, and a count of its commits so far."""
    if backend == "sqlite":
        conn = sqlite_connection(url)
        try:
            groups = SqliteGroups(conn)
            yield sqlite_units(groups), lambda: groups.commits
        finally:
            if groups.open:
                groups.commit()
            conn.close()
    else:
        conns = [await psycopg.AsyncConnection.connect(url, autocommit=True)
                 for _ in range(connections)]
        pgroups = PgGroups(conns)
        try:
            yield pg_units(pgroups), lambda: pgroups.commits
        finally:
            await pgroups.close()
            for pconn in conns:
                await pconn.close()


def sqlite_connection(url: str) -> sqlite3.Connection:
    conn = sqlite3.connect(url, isolation_level=None)
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


async def conversations(url: str, count: int) -> tuple[list[str], str]:
    """``count`` conversations made by tidings, and the instance that made them."""
    async with tidings.open(url, models=[ScriptedModel()]) as rt:
        made = [await rt.create_conversation(OWNER, Profile(model="scripted"))
                for _ in range(count)]
        instance = rt.instance_id
    return [m.conversation_id for m in made], instance


async def turn_units(unit: Unit, route: int, conv: str, instance: str, n: int) -> None:
    """A turn's two units through a concurrent runner: each durable before the next step."""
    turn = Turn(conv, instance, n)
    await unit(route, TAKE, turn.p, turn.begun, BEGIN_WRITES, True, True)
    await unit(route, GIVE, turn.p, turn.ended, END_WRITES, True, True)


def process_cpu_s() -> float:
    """CPU time of this process, every thread, user + system."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def cpu_per_turn(backend: str, dsn: str, plan: Plan) -> dict[str, Any]:
    """100 conversations, each posting its next turn as soon as its last one ended (no model
    delay), for a warm-up and then a measured window: this process's CPU time per turn."""
    async with scratch_url(backend, dsn, "floorcpu") as url:
        convs, instance = await conversations(url, plan.conversations)
        async with units_on(backend, url, plan.pg_connections) as (unit, commits):
            turns = 0
            stop = False

            async def converse(route: int, conv: str) -> None:
                nonlocal turns
                n = 0
                while not stop:
                    await turn_units(unit, route, conv, instance, n)
                    n += 1
                    turns += 1

            tasks = [asyncio.create_task(converse(i, c)) for i, c in enumerate(convs)]
            try:
                await asyncio.sleep(plan.cpu_warmup_s)
                turns0, cpu0, t0, commits0 = turns, process_cpu_s(), time.perf_counter(), commits()
                await asyncio.sleep(plan.cpu_window_s)
                turns1, cpu1, t1, commits1 = turns, process_cpu_s(), time.perf_counter(), commits()
            finally:
                stop = True
                await asyncio.gather(*tasks, return_exceptions=True)
    done = turns1 - turns0
    figures: dict[str, Any] = {"turns": done, "turns_per_s": done / (t1 - t0),
                               "cpu_per_turn_us": (cpu1 - cpu0) / done * 1e6}
    if commits0 is not None and commits1 is not None and commits1 > commits0:
        figures["units_per_commit"] = 2 * done / (commits1 - commits0)
    return figures


# -- the wake: a background process exits, its conversation's next turn begins ------------------

TASK = (
    "INSERT INTO tasks (task_id, conversation_id, task_key, run_id, command, notify, lifetime,"
    " state, instance_id, started_at_us) VALUES (:task, :conv, :key, NULL, 'sleep 0.05',"
    " 'on_exit', 'conversation', 'running', :instance, :now) RETURNING task_id"
)
TASK_ENDED = (
    "UPDATE tasks SET state = 'exited', exit_code = 0, committed = 1, handed_off = 1,"
    " delivered = 1, consumed = 1, duration_ms = :duration, ended_at_us = :ended"
    " WHERE task_id = :task AND state = 'running'"
)
TASK_INPUT = INPUT.replace("'person', 0, 'human', 'person'", "'task_result', 1, 'agent', 'tasks'")


def task_ended(turn: Turn, ending: dict[str, Any], taken: tuple[int, int, int]) -> dict[str, Any]:
    return {**turn.begun(taken), **ending}


async def wake(backend: str, dsn: str, plan: Plan) -> dict[str, Any]:
    """One conversation, one background process at a time (``sleep 0.05``, started by asyncio
    as tidings' supervisor starts it). From the moment ``wait()`` returns (where the supervisor
    stamps the exit) to the commit of one unit that ends the task and begins the next turn
    (the counters and slot taken, the task's result as the turn's input, the run, two journal
    rows): then the model would be called. The turn's end follows, untimed."""
    async with scratch_url(backend, dsn, "floorwake") as url:
        conv, instance = await conversation(url)
        async with units_on(backend, url, 1) as (unit, _):
            samples: list[float] = []
            for n in range(plan.wake_samples + 3):
                task = new_id("task")
                now = time.time_ns() // 1000
                await unit(0, TASK, {"task": task, "conv": conv, "key": f"t{n}",
                                     "instance": instance, "now": now},
                           lambda _: None, (), True, False)
                process = await asyncio.create_subprocess_exec("sleep", "0.05")
                await process.wait()
                t0 = time.perf_counter()
                ended = time.time_ns() // 1000
                turn = Turn(conv, instance, n)
                ending = {"task": task, "ended": ended, "duration": (ended - now) // 1000}
                await unit(0, TAKE, turn.p, functools.partial(task_ended, turn, ending),
                           (TASK_ENDED, TASK_INPUT, RUN, EVENTS_2), True, True)
                if n >= 3:
                    samples.append(time.perf_counter() - t0)
                await unit(0, GIVE, turn.p, turn.ended, END_WRITES, True, True)
    return {"wake_p50_us": statistics.median(samples) * 1e6,
            "wake_p90_us": statistics.quantiles(samples, n=10)[-1] * 1e6,
            "samples": len(samples)}


# -- the outbox end to end: publish -> claim -> consume with one row -----------------------------

PUBLISH = (
    "INSERT INTO signal_queues (conversation_id, last_seq, backlog) VALUES (:conv, 1, 1)"
    " ON CONFLICT (conversation_id) DO UPDATE SET last_seq = signal_queues.last_seq + 1,"
    " backlog = signal_queues.backlog + 1 WHERE signal_queues.backlog < 1000000"
    " RETURNING last_seq, backlog"
)
SIGNAL = (  # SQLite: the schema's trigger signal_events_deliver writes the delivery
    "INSERT INTO signal_events (event_id, type, operation_id, conversation_id, idempotency_key,"
    " payload, payload_bytes, schema_version, published_at_us) VALUES (:event, 'task.exited',"
    " NULL, :conv, :key, :payload, :bytes, 1, :now)"
)
CLAIM = (  # SQLite's: the batch read, then leased by its sequence span
    "SELECT d.delivery_id, d.queue_seq, e.payload, d.payload_bytes FROM signal_deliveries d"
    " JOIN signal_events e ON {join} WHERE d.conversation_id = :conv"
    " AND d.state IN ('ready', 'leased') AND d.claimable_at_us <= :now"
    " ORDER BY d.queue_seq LIMIT :count"
)
LEASE = (
    "UPDATE signal_deliveries SET state = 'leased', lease_token = :token,"
    " lease_deadline_us = :deadline, claimable_at_us = :deadline, lease_instance = :instance,"
    " attempts = attempts + 1 WHERE conversation_id = :conv AND state IN ('ready', 'leased')"
    " AND queue_seq BETWEEN :first AND :last"
)
ACK = (
    "UPDATE signal_deliveries SET state = 'acknowledged', settled_at_us = :now,"
    " lease_deadline_us = NULL, claimable_at_us = 0 WHERE conversation_id = :conv"
    " AND state IN ('ready', 'leased') AND queue_seq BETWEEN :first AND :last"
    " AND lease_token = :token AND lease_deadline_us > :now RETURNING delivery_id"
)
SETTLE = (
    "UPDATE signal_queues SET backlog = backlog - :expected,"
    " head_seq = {greatest}(head_seq, :last + 1) WHERE conversation_id = :conv"
)
OPERATION = (
    "INSERT INTO operations (operation_id, kind, owner, origin_instance, idempotency_key, state,"
    " accepted_at_us) VALUES (:op, 'turn', :conv, :instance, :op, 'accepted', :now)"
)
# PostgreSQL's outbox units are one statement each (the design's "one statement per unit").
PG_PUBLISH = (
    "WITH q AS (INSERT INTO signal_queues AS q (conversation_id, last_seq, backlog)"
    " VALUES (:conv, 1, 1) ON CONFLICT (conversation_id) DO UPDATE"
    " SET last_seq = q.last_seq + 1, backlog = q.backlog + 1 WHERE q.backlog < 1000000"
    " RETURNING q.last_seq, q.backlog),"
    " ev AS (INSERT INTO signal_events (event_id, type, operation_id, conversation_id,"
    " idempotency_key, payload, payload_bytes, schema_version, published_at_us)"
    " SELECT :event, 'task.exited', NULL, :conv, :key, :payload, :bytes, 1, :now FROM q"
    " RETURNING event_id),"
    " dl AS (INSERT INTO signal_deliveries (event_id, conversation_id, queue_seq, state,"
    " attempts, claimable_at_us, payload_bytes, published_at_us)"
    " SELECT ev.event_id, :conv, q.last_seq, 'ready', 0, :now, :bytes, :now FROM ev, q"
    " RETURNING delivery_id)"
    " SELECT q.last_seq, q.backlog FROM q, dl"
)
PG_CLAIM = (
    "WITH picked AS (SELECT delivery_id FROM signal_deliveries WHERE conversation_id = :conv"
    " AND state IN ('ready', 'leased') AND claimable_at_us <= :now ORDER BY queue_seq"
    " LIMIT :count),"
    " leased AS (UPDATE signal_deliveries d SET state = 'leased', lease_token = :token,"
    " lease_deadline_us = :deadline, claimable_at_us = :deadline, lease_instance = :instance,"
    " attempts = d.attempts + 1 FROM picked WHERE d.delivery_id = picked.delivery_id"
    " RETURNING d.delivery_id, d.queue_seq, d.event_id, d.payload_bytes)"
    " SELECT l.delivery_id, l.queue_seq, e.payload, l.payload_bytes FROM leased l"
    " JOIN signal_events e ON e.event_id = l.event_id ORDER BY l.queue_seq"
)
PG_CONSUME = (
    "WITH held AS (SELECT delivery_id FROM signal_deliveries WHERE conversation_id = :conv"
    " AND state IN ('ready', 'leased') AND queue_seq BETWEEN :first AND :last"
    " AND lease_token = :token AND lease_deadline_us > :now FOR UPDATE),"
    " acked AS (UPDATE signal_deliveries SET state = 'acknowledged', settled_at_us = :now,"
    " lease_deadline_us = NULL, claimable_at_us = 0"
    " WHERE delivery_id IN (SELECT delivery_id FROM held)"
    " AND (SELECT count(*) FROM held) = :expected RETURNING delivery_id),"
    " settled AS (UPDATE signal_queues SET backlog = backlog - :expected,"
    " head_seq = greatest(head_seq, :last + 1) WHERE conversation_id = :conv"
    " AND (SELECT count(*) FROM held) = :expected RETURNING 1),"
    " op AS (INSERT INTO operations (operation_id, kind, owner, origin_instance,"
    " idempotency_key, state, accepted_at_us)"
    " SELECT :op, 'turn', :conv, :instance, :op, 'accepted', :now"
    " WHERE (SELECT count(*) FROM held) = :expected RETURNING 1)"
    " SELECT delivery_id FROM acked"
)
PAYLOAD = json.dumps({"task": "t", "exit_code": 0, "excerpt": "x" * 64}, separators=(",", ":"))


class Outbox:
    """The outbox's three steps by hand, in the statements of ``backend``'s dialect."""

    def __init__(self, backend: str, unit: Unit, instance: str) -> None:
        self.unit = unit
        self.instance = instance
        if backend == "sqlite":  # a unit: its first statement's answer, then the writes
            self.publish_sql, self.claim_sql, self.consume_sql = (
                PUBLISH, CLAIM.format(join="e.seq = d.delivery_id"), ACK)
            self.publish_writes: tuple[str, ...] = (SIGNAL,)
            self.claim_writes: tuple[str, ...] = (LEASE,)
            self.consume_writes: tuple[str, ...] = (SETTLE.format(greatest="max"), OPERATION)
            self.claim_durable = False  # it shares the consume's commit
        else:  # one statement per unit
            self.publish_sql, self.publish_writes = PG_PUBLISH, ()
            self.claim_sql, self.claim_writes = PG_CLAIM, ()
            self.consume_sql, self.consume_writes = PG_CONSUME, ()
            self.claim_durable = True  # alone, one statement in autocommit costs least

    async def publish(self, route: int, conv: str) -> int:
        """One signal, its own durable unit; the backlog after it (1: the queue was empty)."""
        backlog = 0
        params = {"conv": conv, "event": new_id("evt"), "key": uuid.uuid4().hex,
                  "payload": PAYLOAD, "bytes": len(PAYLOAD), "now": time.time_ns() // 1000}

        def fill(row: Any) -> dict[str, Any]:
            nonlocal backlog
            backlog = row[1]
            return {**params, "queue_seq": row[0]}

        await self.unit(route, self.publish_sql, params, fill, self.publish_writes, True, True)
        return backlog

    async def claim(self, route: int, conv: str, count: int) -> dict[str, Any] | None:
        """Up to ``count`` ready signals leased in one unit that needs no fsync of its own."""
        now = time.time_ns() // 1000
        lease: dict[str, Any] = {"conv": conv, "token": uuid.uuid4().hex, "now": now,
                                 "deadline": now + 60_000_000, "instance": self.instance,
                                 "count": count}
        taken: list[Any] = []

        def fill(rows: list[Any]) -> dict[str, Any] | None:
            if not rows:
                return None
            taken.extend(rows)
            lease.update(first=rows[0][1], last=rows[-1][1], expected=len(rows))
            return lease

        await self.unit(route, self.claim_sql, lease, fill, self.claim_writes,
                        self.claim_durable, False)
        return lease if taken else None

    async def consume(self, route: int, lease: dict[str, Any]) -> None:
        """The lease acknowledged, all or nothing, with one row of the consumer's own."""
        params = {**lease, "now": time.time_ns() // 1000, "op": new_id("op")}

        def fill(rows: list[Any]) -> dict[str, Any]:
            if len(rows) != lease["expected"]:
                raise RuntimeError(f"stale lease: {len(rows)} of {lease['expected']} acked")
            return params

        await self.unit(route, self.consume_sql, params, fill, self.consume_writes, True, False)


async def e2e_one(backend: str, dsn: str, plan: Plan) -> dict[str, Any]:
    """One conversation, serially: publish, claim one, consume it with one row."""
    async with scratch_url(backend, dsn, "floore2e1") as url:
        _, instance = await conversation(url)
        async with units_on(backend, url, 1) as (unit, commits):
            box = Outbox(backend, unit, instance)

            async def one() -> None:
                await box.publish(0, "conv-e2e-1")
                lease = await box.claim(0, "conv-e2e-1", 1)
                if lease is None or lease["expected"] != 1:
                    raise RuntimeError("e2e_1 claimed nothing")
                await box.consume(0, lease)

            for _ in range(plan.e2e1_warmup):
                await one()
            count, commits0 = 0, commits()
            t0 = time.perf_counter()
            end = t0 + plan.e2e1_seconds
            while time.perf_counter() < end:
                await one()
                count += 1
            elapsed = time.perf_counter() - t0
            commits1 = commits()
    figures: dict[str, Any] = {"messages": count, "messages_per_s": count / elapsed}
    if commits0 is not None and commits1 is not None:
        figures["commits_per_message"] = (commits1 - commits0) / count
    return figures


def unsettled(backend: str, url: str) -> tuple[int, int]:
    """The queues' backlog and the deliveries still ready or leased: (0, 0) once all is done."""
    query = ("SELECT (SELECT coalesce(sum(backlog), 0) FROM signal_queues),"
             " (SELECT count(*) FROM signal_deliveries WHERE state IN ('ready', 'leased'))")
    if backend == "sqlite":
        conn = sqlite3.connect(url)
        try:
            row = conn.execute(query).fetchone()
        finally:
            conn.close()
    else:
        with psycopg.connect(url) as pconn:
            row = pconn.execute(query).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


async def e2e_many(backend: str, dsn: str, plan: Plan) -> dict[str, Any]:
    """100 conversations in one process: a producer per conversation (one publish per unit,
    ``e2e_in_flight`` publishes at once), and ``e2e_consumers`` consumers; a conversation is
    due when a publish finds its queue was empty, and one consumer at a time claims up to 16 of
    it and consumes them with one row, again until a claim comes back empty."""
    async with scratch_url(backend, dsn, "floore2e100") as url:
        _, instance = await conversation(url)
        convs = [f"conv-{i:03d}" for i in range(plan.conversations)]
        async with units_on(backend, url, plan.pg_connections) as (unit, commits):
            box = Outbox(backend, unit, instance)
            due: asyncio.Queue[int] = asyncio.Queue()
            scheduled: set[int] = set()
            dirty: set[int] = set()
            acked = 0
            target = 0
            reached = asyncio.Event()

            def schedule(route: int) -> None:
                if route in scheduled:
                    dirty.add(route)
                else:
                    scheduled.add(route)
                    due.put_nowait(route)

            failed: list[Exception] = []

            async def consumer() -> None:
                try:
                    await consume()
                except Exception as exc:  # named by the phase it stops
                    failed.append(exc)
                    reached.set()

            async def consume() -> None:
                nonlocal acked
                while True:
                    route = await due.get()
                    dirty.discard(route)
                    lease = await box.claim(route, convs[route], CLAIM_COUNT)
                    if lease is not None:
                        await box.consume(route, lease)
                        acked += lease["expected"]
                        if acked >= target:
                            reached.set()
                    if lease is not None or route in dirty:
                        dirty.discard(route)
                        due.put_nowait(route)
                    else:
                        scheduled.discard(route)

            in_flight = asyncio.Semaphore(plan.e2e_in_flight)

            async def produce(route: int, count: int) -> None:
                for _ in range(count):
                    async with in_flight:
                        if await box.publish(route, convs[route]) == 1:
                            schedule(route)

            async def phase(messages: int) -> float:
                nonlocal target
                per = messages // len(convs)
                target = acked + per * len(convs)
                reached.clear()
                t0 = time.perf_counter()
                await asyncio.gather(*(produce(r, per) for r in range(len(convs))))
                await reached.wait()
                if failed:
                    raise RuntimeError("a consumer failed") from failed[0]
                return time.perf_counter() - t0

            helpers = [asyncio.create_task(consumer()) for _ in range(plan.e2e_consumers)]
            try:
                await phase(plan.e2e100_warmup)
                commits0, cpu0 = commits(), process_cpu_s()
                elapsed = await phase(plan.e2e100_messages)
                commits1, cpu1 = commits(), process_cpu_s()
            finally:
                for task in helpers:
                    task.cancel()
                await asyncio.gather(*helpers, return_exceptions=True)
        left = unsettled(backend, url)
        if left != (0, 0):
            raise RuntimeError(f"e2e_100 left a backlog of {left[0]} ({left[1]} deliveries)")
    measured = plan.e2e100_messages // len(convs) * len(convs)
    figures: dict[str, Any] = {"messages": measured, "messages_per_s": measured / elapsed,
                               "cpu_per_message_us": (cpu1 - cpu0) / measured * 1e6,
                               "in_flight": plan.e2e_in_flight,
                               "consumers": plan.e2e_consumers}
    if commits0 is not None and commits1 is not None:
        figures["commits_per_message"] = (commits1 - commits0) / measured
    return figures


STEPS = ("turn", "cpu", "wake", "e2e1", "e2e100")


async def main_async(args: argparse.Namespace) -> int:
    plan = QUICK if args.quick else FULL
    steps = [n for n in args.only.split(",") if n] if args.only else list(STEPS)
    out: dict[str, Any] = {"quick": args.quick, "revision": source_revision()}
    errors: dict[str, str] = {}
    figures: dict[str, Any] = {}
    for backend in ("sqlite", "postgres"):
        if args.backend in (backend, "both"):
            await bench_backend(backend, args.postgres_dsn, plan, steps, out, errors, figures)
    print(json.dumps({**out, "errors": errors, "figures": figures}))
    return 1 if errors else 0


async def bench_backend(backend: str, dsn: str, plan: Plan, steps: list[str], out: dict[str, Any],
                        errors: dict[str, str], figures: dict[str, Any]) -> None:
    """Every step of ``steps`` on one backend: its keys into ``out``, its figures into
    ``figures``, a failed step named in ``errors`` (the others still run)."""
    key = "sqlite" if backend == "sqlite" else "pg"
    runs: dict[str, Callable[[], Awaitable[dict[str, Any]]]] = {
        "turn": lambda: (bench_sqlite(plan.turns, plan.raw_s) if backend == "sqlite"
                         else bench_postgres(dsn, plan.turns, plan.raw_s)),
        "cpu": lambda: cpu_per_turn(backend, dsn, plan),
        "wake": lambda: wake(backend, dsn, plan),
        "e2e1": lambda: e2e_one(backend, dsn, plan),
        "e2e100": lambda: e2e_many(backend, dsn, plan),
    }
    keys = {  # the step's figure -> the headline key
        "turn": {"turn_p50_us": "floor_turn_us", "begin_p50_us": "floor_begin_us",
                 "end_p50_us": "floor_end_us", "raw_commit_p50_us": "raw_commit_p50_us"},
        "cpu": {"cpu_per_turn_us": "floor_cpu_per_turn_us_100", "turns_per_s": "floor_tps_100"},
        "wake": {"wake_p50_us": "floor_wake_us"},
        "e2e1": {"messages_per_s": "floor_e2e_1_msgs"},
        "e2e100": {"messages_per_s": "floor_e2e_100_msgs",
                   "cpu_per_message_us": "floor_cpu_per_msg_us_100"},
    }
    for name in STEPS:
        if name not in steps:
            continue
        log(f"floor {name} on {backend}")
        try:
            found = await runs[name]()
        except Exception as exc:  # a failed step is named; the others still run
            errors[f"{key}_{name}"] = f"{type(exc).__name__}: {exc}"
            log(f"  failed: {exc!r}")
            continue
        figures[f"{key}_{name}"] = found
        log("  " + ", ".join(f"{k} {v:,.1f}" if isinstance(v, float) else f"{k} {v}"
                             for k, v in found.items()))
        for figure, headline in keys[name].items():
            out[f"{key}_{headline}"] = found[figure]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the small plan (under two minutes)")
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--postgres-dsn", default=DEFAULT_DSN)
    parser.add_argument("--only", default="", help=f"a subset of {','.join(STEPS)}")
    return parser.parse_args(argv)


def main() -> int:
    return run_main(main_async, parse_args())


if __name__ == "__main__":
    raise SystemExit(main())
