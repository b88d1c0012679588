"""The turn benchmark: what the kernel adds to a turn, next to the raw commit of the same database.

    python bench/turns.py [--quick] [--backend sqlite|postgres|both] [--postgres-dsn DSN]
                          [--profile]

The model is the scripted one (``ScriptedModel(default={"text": "ok"})``, no delay), wrapped in
a model that times every ``complete``, so what is left of a turn is the kernel's: the door, the
slot, the history read, the commits, the wake-ups. Measured in one run, on each backend (see
bench/README.md for the method of each):

1. raw      -- serial single-row commits of a plain connection (SQLite in WAL at
               synchronous=FULL; psycopg INSERT + COMMIT), before and after the turn figures;
               the mean of the two p50s is the denominator;
2. overhead -- one conversation, serial turns: ``post`` then ``settle``; the wall time of each
               turn minus its model time, p50 and p99, and p50 over the raw commit; on
               PostgreSQL also the writers' round trips per unit (each wait for the server's
               answer: a statement, or a pipeline up to its sync) and the units per turn;
3. tps      -- turns per second with 1 conversation and with 100 conversations (each posts,
               waits for its turn, posts again), and their quotient;
4. idle     -- a fresh child process creates 10,000 conversations, runs one turn in each, lets
               everything settle: resident memory per conversation and CPU while idle.

``--profile`` adds a cProfile of the serial turn path (every thread, the store's writer too) and
prints its top costs on stderr. Progress goes to stderr; stdout gets a table and, last, one
JSON line with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import ctypes
import ctypes.util
import dataclasses
import functools
import gc
import io
import json
import os
import platform
import pstats
import resource
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import psycopg
from harness import (
    DEFAULT_DSN,
    Results,
    err,
    fmt,
    guarded,
    log,
    machine_cpu_s,
    pct_us,
    pg_url,
    source_revision,
    terminate,
    time_loop,
)
from rich.console import Console
from rich.table import Table

from tidings import (
    CoordinatorConfig,
    ModelReply,
    ModelRequest,
    Origin,
    Profile,
    Runtime,
    RuntimeConfig,
    ScriptedModel,
    Store,
    TurnConfig,
    Tx,
)
from tidings.conversations.journal import read_events
from tidings.feed import channel as feed_channel
from tidings.models.base import DeltaCallback
from tidings.records.transcript import ConversationTx
from tidings.types import Event

OWNER = "bench"
PROFILE = Profile(model="scripted", system="You are a benchmark.")
MANY = 100  # conversations of the concurrent throughput figure
HISTORY = TurnConfig().history_messages  # the default window: 200 messages
SMALL_WINDOW = 8

out = Console(highlight=False, width=150)
T = TypeVar("T")


# -- settings ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """How long and how big each measurement is; ``--quick`` picks the small plan."""

    name: str
    raw_seconds: float
    serial_warmup: int  # turns before the samples (the history is seeded full beforehand)
    serial_turns: int  # samples, at most
    serial_seconds: float  # and at most this long (at least 50 samples)
    breakdown_turns: int  # instrumented turns (store units timed one by one)
    small_window_turns: int  # serial turns with an 8-message history window (a diagnostic)
    tps_warmup_s: float
    tps_seconds: float
    idle_conversations: int
    idle_seconds: float
    idle_rounds: int  # a second round of 10,000 tells bounded caches from per-conversation cost
    idle_backends: tuple[str, ...]  # where the idle probe runs (of the backends asked for)
    profile_turns: int


FULL = Plan(
    name="full",
    raw_seconds=5.0,
    serial_warmup=50,
    serial_turns=3_000,
    serial_seconds=12.0,
    breakdown_turns=500,
    small_window_turns=1_000,
    tps_warmup_s=2.0,
    tps_seconds=10.0,
    idle_conversations=10_000,
    idle_seconds=5.0,
    idle_rounds=2,
    idle_backends=("sqlite", "postgres"),
    profile_turns=1_000,
)

QUICK = Plan(
    name="quick",
    raw_seconds=1.5,
    serial_warmup=30,
    serial_turns=600,
    serial_seconds=3.0,
    breakdown_turns=150,
    small_window_turns=200,
    tps_warmup_s=0.5,
    tps_seconds=3.0,
    idle_conversations=10_000,
    idle_seconds=2.0,
    idle_rounds=2,
    idle_backends=("sqlite",),
    profile_turns=300,
)

GOALS: dict[str, tuple[str, float]] = {
    "turn_overhead_ratio": ("<=", 4.0),
    "turns_100_vs_1": (">=", 2.5),
    "idle_bytes_per_conversation": ("<", 2048.0),
    # "about zero": nothing may poll per conversation. 1 % of one CPU allows the heartbeat and
    # the sweep, which are per process.
    "idle_cpu_percent": ("<=", 1.0),
}


# -- databases (as in bench/outbox.py) -----------------------------------------------------------


@dataclass
class Backend:
    """One database kind: makes a scratch database per measurement and drops it after."""

    name: str  # "sqlite" | "postgres"
    key: str  # JSON prefix: "sqlite" | "pg"
    admin_dsn: str
    workdir: Path

    @contextlib.contextmanager
    def scratch(self, purpose: str) -> Iterator[str]:
        """A fresh empty database: a file path (SQLite) or a postgresql:// URL."""
        tag = f"{purpose}_{uuid.uuid4().hex[:8]}"
        if self.name == "sqlite":
            folder = self.workdir / tag
            folder.mkdir()
            try:
                yield str(folder / "bench.db")
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            return
        dbname = f"tidings_bench_{tag}"
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {dbname}")
        try:
            yield pg_url(self.admin_dsn, dbname)
        finally:
            with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {dbname} WITH (FORCE)")

    def store_options(self) -> dict[str, Any]:
        return {"synchronous": "FULL"} if self.name == "sqlite" else {}


# -- 1. raw commits (the method of bench/outbox.py; it is not importable from a plain script) ---


def raw_commits(backend: Backend, url: str, seconds: float) -> dict[str, float]:
    """Serial single-row commits on a plain connection: the database's own commit time."""
    samples: list[float] = []
    if backend.name == "sqlite":
        conn = sqlite3.connect(url, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("CREATE TABLE IF NOT EXISTS raw (id INTEGER PRIMARY KEY, v TEXT)")

            def commit_one() -> None:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT INTO raw (v) VALUES ('payload-of-a-small-row')")
                conn.execute("COMMIT")

            time_loop(commit_one, seconds, samples)
        finally:
            conn.close()
    else:
        with psycopg.connect(url) as pconn:
            pconn.execute("CREATE TABLE IF NOT EXISTS raw (id bigserial PRIMARY KEY, v text)")
            pconn.commit()

            def commit_one() -> None:
                pconn.execute("INSERT INTO raw (v) VALUES ('payload-of-a-small-row')")
                pconn.commit()

            time_loop(commit_one, seconds, samples)
    return {
        "commits_per_s": len(samples) / sum(samples),
        "p50_us": statistics.median(samples) * 1e6,
        "mean_us": statistics.mean(samples) * 1e6,
    }


# -- the runtime under test ----------------------------------------------------------------------


class TimedModel:
    """The scripted model, timed: what a turn spends inside ``complete`` is not the kernel's."""

    def __init__(self, inner: ScriptedModel) -> None:
        self.inner = inner
        self.name = inner.name
        self.seconds = 0.0
        self.calls = 0

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
    ) -> ModelReply:
        t0 = time.perf_counter()
        try:
            return await self.inner.complete(request, on_delta=on_delta)
        finally:
            self.seconds += time.perf_counter() - t0
            self.calls += 1


def timed_model() -> TimedModel:
    return TimedModel(ScriptedModel(default={"text": "ok"}))


@contextlib.asynccontextmanager
async def open_runtime(
    backend: Backend,
    url: str,
    model: TimedModel,
    *,
    concurrent: int = 128,
    history: int = HISTORY,
) -> AsyncIterator[Runtime]:
    config = RuntimeConfig(
        coordinator=CoordinatorConfig(max_concurrent_turns=concurrent),
        turns=TurnConfig(history_messages=history),
    )
    async with Runtime.open(
        url, models=[model], config=config, store_options=backend.store_options()
    ) as rt:
        yield rt


async def new_conversations(rt: Runtime, count: int, *, batch: int = 500) -> list[str]:
    ids: list[str] = []
    for start in range(0, count, batch):
        made = await asyncio.gather(*(
            rt.create_conversation(OWNER, PROFILE) for _ in range(min(batch, count - start))
        ))
        ids += [c.conversation_id for c in made]
    return ids


async def seed_history(rt: Runtime, conv: str, messages: int) -> None:
    """Give a conversation ``messages`` of past exchanges (person, then answer) in one unit, so
    that every measured turn reads a full history window, however many turns it has had."""

    def unit(tx: Tx) -> None:
        cx = ConversationTx.lock(tx, conv, rt.clock)
        for n in range(messages // 2):
            cx.append_user(f"earlier message {n}", origin=Origin.PERSON)
            cx.append_assistant("ok", meta={"model": "scripted"})
        cx.save()

    await rt.store.transact(unit, route=conv)


async def turn(rt: Runtime, conv: str, n: int) -> None:
    """One turn as a person sees it: post, then wait until the conversation is idle again."""
    await rt.post(conv, f"message {n}")
    await rt.settle(conv)


# -- 2. kernel overhead per turn, serially -------------------------------------------------------


async def serial(
    backend: Backend,
    url: str,
    *,
    plan: Plan,
    history: int = HISTORY,
    turns: int | None = None,
    watched: bool = False,
) -> dict[str, Any]:
    """One conversation, its history window full, serial turns: wall, model and the rest.
    ``watched``: with a watcher of the conversation's feed in the same process, as a UI has
    (and how many times the feed read the journal per turn)."""
    model = timed_model()
    samples = plan.serial_turns if turns is None else turns
    breakdown_turns = plan.breakdown_turns if turns is None and not watched else 0
    async with open_runtime(backend, url, model, history=history) as rt:
        conv = (await rt.create_conversation(OWNER, PROFILE)).conversation_id
        await seed_history(rt, conv, HISTORY)
        watching = asyncio.create_task(watch_all(rt, conv)) if watched else None
        reads0 = feed_reads()
        for n in range(plan.serial_warmup):
            await turn(rt, conv, n)
        walls: list[float] = []
        kernel: list[float] = []
        models: list[float] = []
        n = plan.serial_warmup
        busy0 = machine_cpu_s()
        trips0, units0 = round_trips(rt.store)
        end = time.perf_counter() + plan.serial_seconds
        while len(walls) < samples and (len(walls) < 50 or time.perf_counter() < end):
            model_before = model.seconds
            t0 = time.perf_counter()
            await turn(rt, conv, n)
            wall = time.perf_counter() - t0
            spent = model.seconds - model_before
            walls.append(wall)
            models.append(spent)
            kernel.append(wall - spent)
            n += 1
        busy = busy_share(busy0, machine_cpu_s())
        trips1, units1 = round_trips(rt.store)
        reads = feed_reads() - reads0
        if watching is not None:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching
        breakdown = (
            await unit_breakdown(rt, conv, n, breakdown_turns, model) if breakdown_turns else None
        )
        runs = await rt.runs.list(conv)  # the newest ones (the listing is bounded)
        if any(r.status.value != "completed" for r in runs):
            raise RuntimeError("a serial turn did not complete")
        if model.calls != n + breakdown_turns:
            raise RuntimeError(f"{model.calls} model calls for {n + breakdown_turns} posts")
    return {
        "turns": len(walls),
        "warmup_turns": plan.serial_warmup,
        "history_messages": history,
        "machine_busy": busy,
        "wall_p50_us": pct_us(walls, 0.5),
        "wall_p99_us": pct_us(walls, 0.99),
        "model_p50_us": pct_us(models, 0.5),
        "overhead_p50_us": pct_us(kernel, 0.5),
        "overhead_p99_us": pct_us(kernel, 0.99),
        "overhead_mean_us": statistics.mean(kernel) * 1e6,
        "tps": len(walls) / sum(walls),
        # PostgreSQL: the writers' round trips (each wait for the server's answer: a statement,
        # or a pipeline up to its sync) over the units they committed, and units per turn.
        "round_trips_per_unit": (trips1 - trips0) / (units1 - units0)
        if trips0 is not None and trips1 is not None and units1 > units0 else None,
        "units_per_turn": (units1 - units0) / len(walls) if trips0 is not None else None,
        "feed_reads_per_turn": reads / len(walls) if watched else None,
        "breakdown": breakdown,
    }


async def watch_all(rt: Runtime, conv: str) -> None:
    """A watcher of the conversation's feed that takes every event, until cancelled."""
    async for _ in rt.watch(conv, owner=OWNER):
        pass


_FEED_READS = [0]


def _counted_read(tx: Tx, conversation_id: str, **kwargs: Any) -> list[Event]:
    _FEED_READS[0] += 1
    return read_events(tx, conversation_id, **kwargs)


vars(feed_channel)["read_events"] = _counted_read  # the feed's readers count their reads here


def feed_reads() -> int:
    """How many times the feed's readers in this process read a journal so far."""
    return _FEED_READS[0]


def round_trips(store: Store) -> tuple[int | None, int]:
    """The store's writers' round trips so far (None where it does not count them: SQLite) and
    the units of work they committed."""
    trips = getattr(store, "round_trips", None)
    return (None if trips is None else int(trips)), int(getattr(store, "units_committed", 0))


@dataclass
class UnitLog:
    """Every unit of work of the instrumented turns, by kind."""

    count: dict[str, int] = field(default_factory=dict)
    e2e: dict[str, float] = field(default_factory=dict)  # submit -> answer, seconds
    inside: dict[str, float] = field(default_factory=dict)  # the unit's own Python, seconds
    statements: dict[str, int] = field(default_factory=dict)  # SQL statements the unit ran
    reads: int = 0
    read_s: float = 0.0
    read_statements: int = 0

    def add(self, kind: str, e2e: float, inside: float, statements: int) -> None:
        self.count[kind] = self.count.get(kind, 0) + 1
        self.e2e[kind] = self.e2e.get(kind, 0.0) + e2e
        self.inside[kind] = self.inside.get(kind, 0.0) + inside
        self.statements[kind] = self.statements.get(kind, 0) + statements


def counting(tx: Tx, counter: list[int]) -> Tx:
    """Count the SQL statements run through ``tx`` (each is a round trip on PostgreSQL)."""
    run = tx._run

    def counted(statement: str, params: dict[str, Any]) -> tuple[list[Any], int]:
        counter[0] += 1
        return run(statement, params)

    setattr(tx, "_run", counted)  # noqa: B010 -- this transaction only
    return tx


def unit_kind(unit: Callable[[Tx], Any], result: Any) -> str:
    named = getattr(unit, "func", unit)  # a functools.partial names its function
    name = str(getattr(named, "__qualname__", type(unit).__name__))
    if name.startswith("Door.post"):
        return "door.post"
    if name.startswith("Coordinator._start"):
        return "coordinator.begin" if getattr(result, "plan", None) is not None else (
            "coordinator.recheck"
        )
    if name.startswith("TurnRunner._commit"):
        return "runner.finish"
    return name.split(".<locals>")[0]  # the runtime's own upkeep (heartbeat, sweeps)


@contextlib.contextmanager
def instrumented(store: Store) -> Iterator[UnitLog]:
    """Time each unit of work the runtime submits, end to end and inside the writer."""
    found = UnitLog()
    transact = store.transact
    submit = store.submit
    own_submit = type(store).submit is not Store.submit  # else submit runs transact
    read = store.read

    def timed_submit(
        unit: Callable[[Tx], T], *, route: str | None = None, durable: bool = True
    ) -> asyncio.Future[T]:
        inside = [0.0]
        statements = [0]
        result: list[Any] = [None]

        def timed(tx: Tx) -> T:
            t = time.perf_counter()
            try:
                value = unit(counting(tx, statements))
                result[0] = value
                return value
            finally:
                inside[0] += time.perf_counter() - t

        t0 = time.perf_counter()
        future = (submit(timed, route=route, durable=durable) if own_submit
                  else asyncio.ensure_future(transact(timed, route=route, durable=durable)))
        future.add_done_callback(lambda _: found.add(
            unit_kind(unit, result[0]), time.perf_counter() - t0, inside[0], statements[0]))
        return future

    async def timed_transact(
        unit: Callable[[Tx], T], *, route: str | None = None, durable: bool = True
    ) -> T:
        return await timed_submit(unit, route=route, durable=durable)

    async def timed_read(unit: Callable[[Tx], T]) -> T:
        statements = [0]
        t0 = time.perf_counter()
        try:
            return await read(lambda tx: unit(counting(tx, statements)))
        finally:
            found.reads += 1
            found.read_s += time.perf_counter() - t0
            found.read_statements += statements[0]

    setattr(store, "transact", timed_transact)  # noqa: B010 -- an instance, not the class
    setattr(store, "submit", timed_submit)  # noqa: B010
    setattr(store, "read", timed_read)  # noqa: B010
    try:
        yield found
    finally:
        delattr(store, "transact")
        delattr(store, "submit")
        delattr(store, "read")


class TimedSql:
    """A stand-in for SQLite's writer connection that times each ``execute``, by kind: the
    commits (the fsync), ``BEGIN`` and savepoints, and every other statement."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.seconds = {"commit": 0.0, "begin": 0.0, "sql": 0.0}

    def execute(self, statement: str, params: Any = ()) -> sqlite3.Cursor:
        t0 = time.perf_counter()
        try:
            return self.conn.execute(statement, params)
        finally:
            kind = ("commit" if statement == "COMMIT"
                    else "begin" if statement.startswith(("BEGIN", "SAVEPOINT", "RELEASE"))
                    else "sql")
            self.seconds[kind] += time.perf_counter() - t0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


@contextlib.contextmanager
def timed_sql(store: Store) -> Iterator[TimedSql | None]:
    """SQLite's writer connection timed while inside (None on PostgreSQL, whose statements run
    on the writer threads' connections, in pipelines)."""
    writer = getattr(store, "_loop_writer", None)  # SQLite's group-committing writer
    conn = getattr(writer, "conn", None)
    if not isinstance(conn, sqlite3.Connection):
        yield None
        return
    timed = TimedSql(conn)
    setattr(writer, "conn", timed)  # noqa: B010 -- this store, for the breakdown only
    try:
        yield timed
    finally:
        setattr(writer, "conn", conn)  # noqa: B010


async def unit_breakdown(
    rt: Runtime, conv: str, start: int, turns: int, model: TimedModel
) -> dict[str, Any]:
    """Where a serial turn's time goes: each unit of work end to end, and the rest."""
    groups_before = int(getattr(rt.store, "groups_committed", 0))
    model_before = model.seconds
    with instrumented(rt.store) as found, timed_sql(rt.store) as sql:
        t0 = time.perf_counter()
        for n in range(start, start + turns):
            await turn(rt, conv, n)
        wall = time.perf_counter() - t0
    groups = int(getattr(rt.store, "groups_committed", 0)) - groups_before
    units: dict[str, dict[str, float]] = {}
    for kind, count in sorted(found.count.items()):
        units[kind] = {
            "per_turn": count / turns,
            "e2e_us": found.e2e[kind] / count * 1e6,
            "inside_us": found.inside[kind] / count * 1e6,
            "statements": found.statements[kind] / count,
        }
    in_units = sum(found.e2e.values())
    model_s = model.seconds - model_before
    return {
        "turns": turns,
        "wall_us": wall / turns * 1e6,
        "units": units,
        "units_per_turn": sum(found.count.values()) / turns,
        "commits_per_turn": groups / turns if groups else None,
        "reads_per_turn": found.reads / turns,
        "read_us": found.read_s / turns * 1e6,
        # Statements of the units and reads, BEGIN/COMMIT not counted.
        "statements_per_turn": (sum(found.statements.values()) + found.read_statements) / turns,
        "model_us": model_s / turns * 1e6,
        # Time in no unit and no model call: tasks, wake-ups, Python between the commits.
        "between_us": (wall - in_units - found.read_s - model_s) / turns * 1e6,
        # SQLite: the writer's statements, timed one by one; the rest of the wall time, less
        # the model's, is Python.
        **({} if sql is None else {
            "commit_us": sql.seconds["commit"] / turns * 1e6,
            "begin_us": sql.seconds["begin"] / turns * 1e6,
            "sql_us": sql.seconds["sql"] / turns * 1e6,
            "python_us": (wall - model_s - found.read_s - sum(sql.seconds.values()))
            / turns * 1e6,
        }),
    }


# -- 3. turns per second, 1 and 100 conversations --------------------------------------------------


async def throughput(
    backend: Backend, url: str, *, plan: Plan, conversations: int
) -> dict[str, Any]:
    """Each conversation posts, waits for its turn, posts again; turns/s over a window."""
    model = timed_model()
    async with open_runtime(backend, url, model, concurrent=max(128, conversations)) as rt:
        convs = await new_conversations(rt, conversations)
        await asyncio.gather(*(seed_history(rt, c, HISTORY) for c in convs))
        done = [0]
        stop = asyncio.Event()

        async def person(conv: str) -> None:
            n = 0
            while not stop.is_set():
                await turn(rt, conv, n)
                n += 1
                done[0] += 1

        people = [asyncio.create_task(person(c)) for c in convs]
        lags: list[float] = []
        measuring = asyncio.Event()
        prober = asyncio.create_task(loop_lag(stop, measuring, lags))
        collector = CollectorTime()
        try:
            await asyncio.sleep(plan.tps_warmup_s)
            before, t0 = done[0], time.perf_counter()
            cpu0, busy0 = time.process_time(), machine_cpu_s()
            measuring.set()
            with collector.timing():
                await asyncio.sleep(plan.tps_seconds)
            measuring.clear()
            after, t1 = done[0], time.perf_counter()
            cpu1, busy1 = time.process_time(), machine_cpu_s()
            stop.set()
            await asyncio.gather(*people, prober)
        finally:
            for task in (*people, prober):
                task.cancel()
            await asyncio.gather(*people, prober, return_exceptions=True)
        turns = after - before
    return {
        "conversations": conversations,
        "turns": turns,
        "seconds": t1 - t0,
        "tps": turns / (t1 - t0),
        "cpu_us_per_turn": (cpu1 - cpu0) / turns * 1e6 if turns else None,
        "gc_us_per_turn": collector.seconds / turns * 1e6 if turns else None,
        "gc_collections": collector.collections,
        "gc_longest_ms": collector.longest * 1e3,
        "machine_busy": busy_share(busy0, busy1),
        "turns_per_conversation": done[0] / conversations,
        "loop_lag_p50_ms": pct_us(lags, 0.5) / 1e3 if lags else None,
        "loop_lag_p99_ms": pct_us(lags, 0.99) / 1e3 if lags else None,
        "loop_lag_max_ms": max(lags) * 1e3 if lags else None,
    }


class CollectorTime:
    """The time the garbage collector takes while :meth:`timing` is entered (part of the
    process's CPU per turn): collections of each generation, their total and the longest."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.longest = 0.0
        self.collections = [0, 0, 0]
        self._began = 0.0

    def _observe(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        took = time.perf_counter() - self._began
        self.seconds += took
        self.longest = max(self.longest, took)
        self.collections[info["generation"]] += 1

    @contextlib.contextmanager
    def timing(self) -> Iterator[None]:
        gc.callbacks.append(self._observe)
        try:
            yield
        finally:
            gc.callbacks.remove(self._observe)


LAG_TICK_S = 0.001


async def loop_lag(stop: asyncio.Event, measuring: asyncio.Event, lags: list[float]) -> None:
    """The event loop's lag: how late a 1 ms sleep wakes, sampled while ``measuring`` is set
    (how long a callback ready now waits behind the work the loop is doing)."""
    while not stop.is_set():
        t0 = time.perf_counter()
        await asyncio.sleep(LAG_TICK_S)
        if measuring.is_set():
            lags.append(max(0.0, time.perf_counter() - t0 - LAG_TICK_S))


def busy_share(before: tuple[float, float], after: tuple[float, float]) -> float | None:
    """The share of the machine's CPUs that were busy (any process) between two readings."""
    total = after[1] - before[1]
    return None if total <= 0 else (after[0] - before[0]) / total


# -- 4. idle conversations: a fresh child process ------------------------------------------------


def rss_now() -> int:
    """Current resident set size in bytes (/proc/self/statm)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def malloc_trim() -> bool:
    """Give the C heap's free pages back to the system, so RSS counts what is still held."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(name).malloc_trim(0)
        return True
    return False


def settled_rss() -> dict[str, int]:
    gc.collect()
    raw = rss_now()
    malloc_trim()
    return {"rss": raw, "rss_trimmed": rss_now(), "objects": len(gc.get_objects()),
            "blocks": sys.getallocatedblocks()}


async def idle_cpu(seconds: float) -> dict[str, float]:
    """CPU this process (every thread) used while it only waited."""
    cpu0, t0 = time.process_time(), time.perf_counter()
    await asyncio.sleep(seconds)
    cpu1, t1 = time.process_time(), time.perf_counter()
    return {"cpu_s": cpu1 - cpu0, "seconds": t1 - t0, "percent": (cpu1 - cpu0) / (t1 - t0) * 100}


async def idle_probe(
    backend: Backend, url: str, count: int, seconds: float, rounds: int
) -> dict[str, Any]:
    """Runs in a child process (``--idle-probe``) so that its memory is its own.

    Each round creates ``count`` conversations, then runs one turn in each and lets everything
    settle; memory is read (after a full collection and ``malloc_trim``) before the first round,
    after the creations and after the turns of each round. The first round's growth per
    conversation is the headline; the second round's is the marginal cost, once the bounded
    caches (SQLite's page cache, the allocator's arenas) were filled by the first.
    """
    model = timed_model()
    async with open_runtime(backend, url, model) as rt:
        # Warm every path (imports, statements, caches) before the baseline.
        warm = await new_conversations(rt, 200)
        await asyncio.gather(*(turn(rt, c, 0) for c in warm))
        await asyncio.sleep(0.2)
        base_cpu = await idle_cpu(seconds)
        before = settled_rss()
        in_flight = asyncio.Semaphore(200)

        async def one(conv: str) -> None:
            async with in_flight:
                await turn(rt, conv, 0)

        done: list[dict[str, Any]] = []
        last = before
        ids_bytes = 0
        for _ in range(rounds):
            t0 = time.perf_counter()
            convs = await new_conversations(rt, count)
            create_s = time.perf_counter() - t0
            # The probe's own list of ids is not the runtime's: measured and taken off.
            ids_bytes = sys.getsizeof(convs) + sum(sys.getsizeof(c) for c in convs)
            await asyncio.sleep(0.2)
            created = settled_rss()
            t0 = time.perf_counter()
            await asyncio.gather(*(one(c) for c in convs))
            turns_s = time.perf_counter() - t0
            await asyncio.sleep(0.5)
            turned = settled_rss()
            done.append({
                "create_s": create_s, "turns_s": turns_s, "created": created, "turned": turned,
                "bytes_per_conversation_created":
                    (created["rss_trimmed"] - last["rss_trimmed"] - ids_bytes) / count,
                "bytes_per_conversation":
                    (turned["rss_trimmed"] - last["rss_trimmed"] - ids_bytes) / count,
                "bytes_per_conversation_untrimmed":
                    (turned["rss"] - last["rss"] - ids_bytes) / count,
                "objects_per_conversation": (turned["objects"] - last["objects"]) / count,
                "blocks_per_conversation": (turned["blocks"] - last["blocks"]) / count,
            })
            last = turned
            ids_bytes = 0  # the next round's list replaces this one
        entries = len(rt.coordinator._entries)
        tasks = len(asyncio.all_tasks())
        threads = threading.active_count()
        cpu = await idle_cpu(seconds)
        completed = model.calls - len(warm)
        # What the periodic, per-process passes cost with every conversation on file.
        t0 = time.perf_counter()
        stranded = await rt.coordinator.sweep()
        t1 = time.perf_counter()
        await rt.outbox.sweep()
        t2 = time.perf_counter()
        await rt.instance.heartbeat()
        t3 = time.perf_counter()
        cache_kib = await rt.store.read(lambda tx: _sqlite_cache_kib(tx)) if (
            backend.name == "sqlite") else None

    first = done[0]
    return {
        "conversations": count * rounds,
        "per_round": count,
        "turns": completed,
        "before": before,
        "rounds": done,
        "peak_rss": peak_rss(),
        "bytes_per_conversation": first["bytes_per_conversation"],
        "bytes_per_conversation_created": first["bytes_per_conversation_created"],
        "bytes_per_conversation_untrimmed": first["bytes_per_conversation_untrimmed"],
        "bytes_per_conversation_marginal": (
            done[1]["bytes_per_conversation"] if len(done) > 1 else None
        ),
        "objects_per_conversation": first["objects_per_conversation"],
        "sqlite_cache_kib_per_connection": cache_kib,
        "coordinator_entries": entries,
        "asyncio_tasks": tasks,
        "threads": threads,
        "idle_cpu_percent": cpu["percent"],
        "idle_cpu_s": cpu["cpu_s"],
        "idle_seconds": cpu["seconds"],
        "idle_cpu_percent_before": base_cpu["percent"],
        "coordinator_sweep_ms": (t1 - t0) * 1e3,
        "coordinator_sweep_found": stranded,
        "outbox_sweep_ms": (t2 - t1) * 1e3,
        "heartbeat_ms": (t3 - t2) * 1e3,
    }


def _sqlite_cache_kib(tx: Tx) -> float | None:
    """SQLite's page cache bound per connection (``PRAGMA cache_size``), in KiB."""
    conn = getattr(tx, "_conn", None)
    if not isinstance(conn, sqlite3.Connection):
        return None
    row = conn.execute("PRAGMA cache_size").fetchone()
    size = int(next(iter(row.values())) if isinstance(row, dict) else row[0])
    if size < 0:
        return float(-size)
    page = conn.execute("PRAGMA page_size").fetchone()
    return size * int(next(iter(page.values())) if isinstance(page, dict) else page[0]) / 1024


def run_idle_child(backend: Backend, url: str, plan: Plan) -> dict[str, Any]:
    command = [
        sys.executable, str(Path(__file__).resolve()), "--idle-probe", url,
        "--backend", backend.name, "--postgres-dsn", backend.admin_dsn,
        "--conversations", str(plan.idle_conversations), "--idle-seconds", str(plan.idle_seconds),
        "--rounds", str(plan.idle_rounds),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"idle probe failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# -- the profile ---------------------------------------------------------------------------------


class ThreadProfiles:
    """cProfile in every thread started while it is installed (the store's writer and readers
    start when the runtime opens), and in the calling thread."""

    def __init__(self) -> None:
        self.profiles: list[cProfile.Profile] = []
        self.layers: dict[str, float] = {}
        self._lock = threading.Lock()

    def _start_in_thread(self, frame: FrameType, event: str, arg: Any) -> None:
        profile = cProfile.Profile()
        with self._lock:
            self.profiles.append(profile)
        profile.enable()  # replaces this hook in the thread

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        threading.setprofile(self._start_in_thread)
        try:
            yield
        finally:
            threading.setprofile(None)

    def report(self, top: int) -> tuple[str, list[dict[str, Any]]]:
        stats: pstats.Stats | None = None
        for profile in self.profiles:
            if stats is None:
                stats = pstats.Stats(profile)
            else:
                stats.add(profile)
        if stats is None:
            return "", []
        text = io.StringIO()
        stats.stream = text  # type: ignore[attr-defined]
        stats.sort_stats("tottime").print_stats(top)
        stats.sort_stats("cumulative").print_stats(top)
        rows: list[dict[str, Any]] = []
        raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
        self.layers = by_layer(raw)
        for (filename, line, name), (_, calls, tottime, cumtime, _) in sorted(
            raw.items(), key=lambda item: item[1][2], reverse=True
        )[:top]:
            rows.append({"function": f"{_short(filename)}:{line}({name})", "calls": calls,
                         "tottime_s": round(tottime, 4), "cumtime_s": round(cumtime, 4)})
        return text.getvalue(), rows


WAITING = "waiting (idle threads, the loop's poll)"


def layer_of(filename: str, name: str) -> str:
    """Which part of the process a profiled function belongs to: a module of tidings, the
    database driver, asyncio, JSON, the waits of idle threads, or the rest."""
    if filename == "~":  # a built-in: named by what it is a method of
        if "sqlite3." in name:
            return "SQLite (its C calls: statements, commits)"
        if "psycopg" in name:
            return "psycopg (its C calls)"
        if any(wait in name for wait in ("acquire", "SimpleQueue", "select", "poll", "recv",
                                         "send")):
            return WAITING
        return "built-ins (len, dict, isinstance, ...)"
    if name.startswith("wait") or filename.endswith(("/threading.py", "/queue.py",
                                                      "/selectors.py", "/_acompat.py")):
        return WAITING  # a driver's or a thread's wait: its own time is mostly blocking
    if "/tidings/" in filename and "/bench/" not in filename:
        module = filename.split("/tidings/", 1)[1]
        return "tidings/" + module.split("/", 1)[0].removesuffix(".py")
    for part, label in (("/psycopg", "psycopg (Python)"), ("/asyncio/", "asyncio"),
                        ("/json/", "json"), ("/bench/", "the bench's own timing")):
        if part in filename:
            return label
    return "other (stdlib, packages)"


def by_layer(raw: dict[Any, Any]) -> dict[str, float]:
    """Own time (cProfile's tottime) per layer, seconds, largest first."""
    layers: dict[str, float] = {}
    for (filename, _, name), (_, _, tottime, _, _) in raw.items():
        key = layer_of(filename, name)
        layers[key] = layers.get(key, 0.0) + tottime
    return dict(sorted(layers.items(), key=lambda item: item[1], reverse=True))


def _short(filename: str) -> str:
    marker = "/tidings/"
    if marker in filename:
        return "tidings/" + filename.split(marker, 1)[1]
    return Path(filename).name if filename.startswith("/") else filename


async def profiled(backend: Backend, url: str, plan: Plan) -> dict[str, Any]:
    """The serial turn path under cProfile (every thread); the top costs go to stderr."""
    model = timed_model()
    profiles = ThreadProfiles()
    with profiles.installed():
        async with open_runtime(backend, url, model) as rt:
            conv = (await rt.create_conversation(OWNER, PROFILE)).conversation_id
            await seed_history(rt, conv, HISTORY)
            for n in range(plan.serial_warmup):
                await turn(rt, conv, n)
            main = cProfile.Profile()
            profiles.profiles.append(main)
            t0 = time.perf_counter()
            main.enable()
            for n in range(plan.serial_warmup, plan.serial_warmup + plan.profile_turns):
                await turn(rt, conv, n)
            main.disable()
            wall = time.perf_counter() - t0
            text, rows = profiles.report(30)
    err.print(f"[bold]cProfile of {plan.profile_turns} serial turns on {backend.name} "
              f"(every thread; tottime and cumulative)[/bold]")
    err.print(text, markup=False, highlight=False)
    busy = sum(s for name, s in profiles.layers.items() if name != WAITING) or 1.0
    layers = {name: {"us_per_turn": round(s / plan.profile_turns * 1e6, 1),
                     "share_of_busy": round(s / busy, 3) if name != WAITING else None}
              for name, s in profiles.layers.items()}
    err.print("[bold]own time by layer, µs per turn under cProfile (which inflates Python "
              "more than C), and share of the busy time[/bold]")
    for name, figures in layers.items():
        share = figures["share_of_busy"]
        err.print(f"  {name:<44} {figures['us_per_turn']:>9,.1f}"
                  + (f"  {share:6.1%}" if share is not None else ""), markup=False)
    return {"turns": plan.profile_turns, "wall_us_per_turn": wall / plan.profile_turns * 1e6,
            "top_tottime": rows, "by_layer": layers}


# -- the run -------------------------------------------------------------------------------------


async def bench_backend(
    backend: Backend, plan: Plan, results: Results, *, profile: bool
) -> None:
    k = backend.key
    figures = results.figures

    async def raw(tag: str) -> None:
        def go() -> dict[str, float]:
            with backend.scratch("raw") as url:
                return raw_commits(backend, url, plan.raw_seconds)

        value = await guarded(results, f"{k}_raw_{tag}", lambda: asyncio.to_thread(go))
        if value is not None:
            figures[f"{k}_raw_{tag}"] = value

    async def scratch_run(name: str, body: Callable[[str], Awaitable[Any]]) -> Any:
        async def go() -> Any:
            with backend.scratch(name) as url:
                return await body(url)

        value = await guarded(results, f"{k}_{name}", go)
        if value is not None:
            figures[f"{k}_{name}"] = value
        return value

    await raw("before")
    value = await scratch_run("serial", functools.partial(serial, backend, plan=plan))
    if value is not None:
        log(f"  overhead p50 {value['overhead_p50_us']:.0f} µs, "
            f"p99 {value['overhead_p99_us']:.0f} µs, {value['tps']:.0f} turns/s")
    value = await scratch_run("serial_watched", functools.partial(
        serial, backend, plan=plan, turns=plan.small_window_turns or plan.serial_turns,
        watched=True))
    if value is not None:
        log(f"  watched: overhead p50 {value['overhead_p50_us']:.0f} µs, "
            f"{value['feed_reads_per_turn']:.2f} feed reads per turn")
    if plan.small_window_turns:
        value = await scratch_run("serial_small_window", functools.partial(
            serial, backend, plan=plan, history=SMALL_WINDOW, turns=plan.small_window_turns
        ))
        if value is not None:
            log(f"  with a {SMALL_WINDOW}-message window: overhead p50 "
                f"{value['overhead_p50_us']:.0f} µs")
    for n in (1, MANY):
        value = await scratch_run(f"tps_{n}", functools.partial(throughput, backend, plan=plan,
                                                                conversations=n))
        if value is not None:
            log(f"  {n} conversation(s): {value['tps']:.0f} turns/s")
    await raw("after")
    p50s = [figures[f"{k}_raw_{t}"]["p50_us"] for t in ("before", "after")
            if f"{k}_raw_{t}" in figures]
    if p50s:
        figures[f"{k}_raw_commit_us"] = statistics.mean(p50s)
        figures[f"{k}_raw_spread"] = max(p50s) / min(p50s)
    if backend.name in plan.idle_backends:
        await scratch_run(
            "idle", lambda url: asyncio.to_thread(run_idle_child, backend, url, plan)
        )
    if profile:
        await scratch_run("profile", lambda url: profiled(backend, url, plan))


def summarize(figures: dict[str, Any]) -> dict[str, Any]:
    """The headline keys of the JSON line."""
    summary: dict[str, Any] = {}
    for key in ("sqlite", "pg"):
        raw = figures.get(f"{key}_raw_commit_us")
        s = figures.get(f"{key}_serial", {})
        one = figures.get(f"{key}_tps_1", {}).get("tps")
        many = figures.get(f"{key}_tps_{MANY}", {}).get("tps")
        p50 = s.get("overhead_p50_us")
        summary[f"{key}_turn_overhead_ratio"] = p50 / raw if p50 and raw else None
        summary[f"{key}_turns_100_vs_1"] = many / one if many and one else None
        summary[f"{key}_raw_commit_us"] = raw
        summary[f"{key}_turn_overhead_p50_us"] = p50
        summary[f"{key}_turn_overhead_p99_us"] = s.get("overhead_p99_us")
        watched = figures.get(f"{key}_serial_watched", {})
        summary[f"{key}_turn_overhead_watched_us"] = watched.get("overhead_p50_us")
        summary[f"{key}_feed_reads_per_turn"] = watched.get("feed_reads_per_turn")
        summary[f"{key}_turn_overhead_p50_us_small_window"] = (
            figures.get(f"{key}_serial_small_window", {}).get("overhead_p50_us")
        )
        summary[f"{key}_turn_wall_p50_us"] = s.get("wall_p50_us")
        summary[f"{key}_tps_1"] = one
        summary[f"{key}_tps_100"] = many
        summary[f"{key}_tps_serial"] = s.get("tps")
        idle = figures.get(f"{key}_idle", {})
        summary[f"{key}_idle_bytes_per_conversation"] = idle.get("bytes_per_conversation")
        summary[f"{key}_idle_cpu_percent"] = idle.get("idle_cpu_percent")
        # Absolute figures (the goals are set against a floor measured beside them, not a ratio).
        summary[f"{key}_turn_overhead_us"] = p50
        summary[f"{key}_raw_commit_p50_us"] = raw
        many_figure = figures.get(f"{key}_tps_{MANY}", {})
        summary[f"{key}_cpu_per_turn_us_100"] = many_figure.get("cpu_us_per_turn")
        summary[f"{key}_loop_lag_p99_ms"] = many_figure.get("loop_lag_p99_ms")
        summary[f"{key}_gc_us_per_turn_100"] = many_figure.get("gc_us_per_turn")
    summary["pg_round_trips_per_unit"] = figures.get("pg_serial", {}).get("round_trips_per_unit")
    summary["pg_units_per_turn"] = figures.get("pg_serial", {}).get("units_per_turn")
    summary["idle_bytes_per_conversation"] = summary["sqlite_idle_bytes_per_conversation"]
    summary["idle_cpu_percent"] = summary["sqlite_idle_cpu_percent"]
    if summary["idle_bytes_per_conversation"] is None:
        summary["idle_bytes_per_conversation"] = summary["pg_idle_bytes_per_conversation"]
        summary["idle_cpu_percent"] = summary["pg_idle_cpu_percent"]
    return summary


def met(goal: str | None, value: Any) -> str:
    if goal is None:
        return ""
    if value is None:
        return "[yellow]n/a[/yellow]"
    op, bound = GOALS[goal]
    ok = {"<=": value <= bound, ">=": value >= bound, "<": value < bound}[op]
    return "[green]✓[/green]" if ok else "[red]✗[/red]"


def print_table(figures: dict[str, Any], summary: dict[str, Any]) -> None:
    table = Table(title="tidings turns: kernel cost of a turn, next to the raw commit")
    table.add_column("figure")
    table.add_column("SQLite", justify="right")
    table.add_column("", justify="center")
    table.add_column("PostgreSQL", justify="right")
    table.add_column("", justify="center")
    table.add_column("goal", justify="right")

    def get(key: str, *path: str) -> Any:
        value: Any = figures.get(key)
        for part in path:
            value = value.get(part) if isinstance(value, dict) else None
        return value

    def row(label: str, name: str, digits: int = 0, goal: str | None = None,
            path: tuple[str, ...] | None = None) -> None:
        cells = [label]
        for key in ("sqlite", "pg"):
            value = get(f"{key}_{path[0]}", *path[1:]) if path else summary.get(f"{key}_{name}")
            cells += [fmt(value, digits), met(goal, value)]
        if goal is None:
            cells.append("")
        else:
            op, bound = GOALS[goal]
            cells.append(f"{op} {bound:g}")
        table.add_row(*cells)

    row("raw single-row commit p50 (µs), mean of before/after", "raw_commit_us")
    row("  raw p50 before (µs)", "", path=("raw_before", "p50_us"))
    row("  raw p50 after (µs)", "", path=("raw_after", "p50_us"))
    row("turn wall p50, post → settled (µs)", "turn_wall_p50_us")
    row("kernel overhead p50 (µs)", "turn_overhead_p50_us")
    row("kernel overhead p99 (µs)", "turn_overhead_p99_us")
    row("turn_overhead_ratio (p50 / raw commit)", "turn_overhead_ratio", 2, "turn_overhead_ratio")
    row("  overhead p50 with a watcher of the feed (µs)", "turn_overhead_watched_us")
    row("  the feed's reads of the journal per watched turn", "feed_reads_per_turn", 2)
    row(f"  overhead p50 with a {SMALL_WINDOW}-message window (µs)", "",
        path=("serial_small_window", "overhead_p50_us"))
    row("  machine CPUs busy during the serial turns (share)", "", 2,
        path=("serial", "machine_busy"))
    row("  units of work per serial turn (PostgreSQL)", "", 2, path=("serial", "units_per_turn"))
    row("  round trips per unit, serial turns (PostgreSQL)", "", 2,
        path=("serial", "round_trips_per_unit"))
    row("turns/s, 1 conversation", "tps_1")
    row(f"turns/s, {MANY} conversations", "tps_100")
    row(f"turns_100_vs_1 ({MANY} / 1)", "turns_100_vs_1", 2, "turns_100_vs_1")
    row(f"  process CPU per turn, {MANY} conversations (µs)", "",
        path=(f"tps_{MANY}", "cpu_us_per_turn"))
    row(f"  of which the garbage collector, {MANY} conversations (µs)", "",
        path=(f"tps_{MANY}", "gc_us_per_turn"))
    row(f"  machine CPUs busy, {MANY} conversations (share)", "", 2,
        path=(f"tps_{MANY}", "machine_busy"))
    row("idle: bytes per conversation (10k, one turn each)", "idle_bytes_per_conversation", 0,
        "idle_bytes_per_conversation")
    row("idle: bytes per conversation, created only", "",
        path=("idle", "bytes_per_conversation_created"))
    row("idle: bytes per conversation, RSS untrimmed", "",
        path=("idle", "bytes_per_conversation_untrimmed"))
    row("idle: bytes per conversation, second 10k (marginal)", "",
        path=("idle", "bytes_per_conversation_marginal"))
    row("idle: live Python objects per conversation", "", 2,
        path=("idle", "objects_per_conversation"))
    row("idle: CPU with 10k idle (% of one CPU)", "idle_cpu_percent", 2, "idle_cpu_percent")
    row("idle: CPU before the 10k (% of one CPU)", "", 2,
        path=("idle", "idle_cpu_percent_before"))
    row("idle: one coordinator sweep, all on file (ms)", "", 1,
        path=("idle", "coordinator_sweep_ms"))
    row("idle: one outbox sweep, all on file (ms)", "", 1, path=("idle", "outbox_sweep_ms"))
    out.print(table)

    breakdown = Table(title="where a serial turn goes (instrumented turns, µs per turn; the "
                            "runtime's upkeep units, a few per thousand turns, are in the JSON)")
    breakdown.add_column("part")
    for title in ("SQLite", "PostgreSQL"):
        breakdown.add_column(f"{title} per turn", justify="right")
        breakdown.add_column("e2e µs", justify="right")
        breakdown.add_column("in unit µs", justify="right")
        breakdown.add_column("statements", justify="right")
    kinds: list[str] = []
    for key in ("sqlite", "pg"):
        for kind, unit in (get(f"{key}_serial", "breakdown", "units") or {}).items():
            if unit["per_turn"] >= 0.5 and kind not in kinds:
                kinds.append(kind)
    for kind in kinds:
        cells = [f"unit {kind}"]
        for key in ("sqlite", "pg"):
            unit = get(f"{key}_serial", "breakdown", "units", kind) or {}
            cells += [fmt(unit.get("per_turn"), 2), fmt(unit.get("e2e_us")),
                      fmt(unit.get("inside_us")), fmt(unit.get("statements"), 1)]
        breakdown.add_row(*cells)
    cells = ["reads (settle's check)"]
    for key in ("sqlite", "pg"):
        cells += [fmt(get(f"{key}_serial", "breakdown", "reads_per_turn"), 2),
                  fmt(get(f"{key}_serial", "breakdown", "read_us")), "", ""]
    breakdown.add_row(*cells)
    for label, name, digits in (("commits (groups) per turn", "commits_per_turn", 2),
                                ("SQL statements per turn", "statements_per_turn", 1),
                                ("model call", "model_us", 0),
                                ("between units (tasks, wake-ups, prompt)", "between_us", 0),
                                ("the commits (SQLite, timed)", "commit_us", 0),
                                ("BEGIN, savepoints (SQLite, timed)", "begin_us", 0),
                                ("other statements (SQLite, timed)", "sql_us", 0),
                                ("the rest: Python (SQLite)", "python_us", 0),
                                ("turn wall", "wall_us", 0)):
        cells = [label]
        for key in ("sqlite", "pg"):
            cells += [fmt(get(f"{key}_serial", "breakdown", name), digits), "", "", ""]
        breakdown.add_row(*cells)
    out.print(breakdown)


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
    }
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    return info


async def main_async(args: argparse.Namespace) -> int:
    plan = QUICK if args.quick else FULL
    if args.idle_backends:
        plan = dataclasses.replace(plan, idle_backends=tuple(args.idle_backends.split(",")))
    started = time.perf_counter()
    load_before = os.getloadavg()
    results = Results()
    workdir = Path(tempfile.mkdtemp(prefix="tidings-bench-turns-", dir=args.workdir))
    settings: dict[str, Any] = {
        "plan": plan.__dict__,
        "sqlite_synchronous": "FULL",
        "sqlite_journal_mode": "WAL",
        "postgres_dsn": args.postgres_dsn,
        "model": 'ScriptedModel(default={"text": "ok"}), timed',
        "command": " ".join(["python", "bench/turns.py", *sys.argv[1:]]),
        "revision": source_revision(),
        "gc_threshold": list(gc.get_threshold()),
        "gc_frozen_objects": gc.get_freeze_count(),
    }
    try:
        backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
        for name in backends:
            backend = Backend(name=name, key="sqlite" if name == "sqlite" else "pg",
                              admin_dsn=args.postgres_dsn, workdir=workdir)
            log(f"[bold]{name}[/bold] ({plan.name} plan)")
            await bench_backend(backend, plan, results, profile=args.profile)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    summary = summarize(results.figures)
    print_table(results.figures, summary)
    if results.errors:
        out.print("[red]errors:[/red]")
        for name, message in results.errors.items():
            out.print(f"  {name}: {message}")
    elapsed = time.perf_counter() - started
    out.print(f"total {elapsed:.0f}s, {plan.name} plan, SQLite synchronous=FULL, "
              f"load average before {load_before[0]:.1f}, after {os.getloadavg()[0]:.1f} "
              f"({os.cpu_count()} CPUs)")
    line = {
        **summary,
        "seconds": round(elapsed, 1),
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "settings": settings,
        "machine": machine(),
        "figures": results.figures,
        "errors": results.errors,
    }
    sys.stdout.flush()
    print(json.dumps(line, default=str, separators=(",", ":")))
    return 1 if results.errors else 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="the small plan (under 2 minutes)")
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--postgres-dsn", default=DEFAULT_DSN,
                        help="an admin DSN; a scratch database is made and dropped per figure")
    parser.add_argument("--idle-backends",
                        help="comma-separated backends for the idle probe (default: sqlite in "
                             "the quick plan, both in the full plan)")
    parser.add_argument("--profile", action="store_true",
                        help="also cProfile the serial turn path and print its top costs")
    parser.add_argument("--workdir", help="folder for the SQLite files (default: the temp dir)")
    parser.add_argument("--gc-threshold", metavar="G0,G1,G2",
                        help="the garbage collector's thresholds for this run (an experiment)")
    parser.add_argument("--gc-freeze", action="store_true",
                        help="move what the imports made out of the collector's way first "
                             "(gc.freeze; an experiment)")
    parser.add_argument("--idle-probe", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--conversations", type=int, default=10_000, help=argparse.SUPPRESS)
    parser.add_argument("--idle-seconds", type=float, default=5.0, help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=1, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main() -> int:
    signal.signal(signal.SIGTERM, terminate)
    args = parse_args()
    if args.idle_probe:
        backend = Backend(name=args.backend, key="", admin_dsn=args.postgres_dsn,
                          workdir=Path("."))
        probe = asyncio.run(idle_probe(backend, args.idle_probe, args.conversations,
                                       args.idle_seconds, args.rounds))
        print(json.dumps(probe))
        return 0
    if args.gc_threshold:
        g0, g1, g2 = (int(part) for part in args.gc_threshold.split(","))
        gc.set_threshold(g0, g1, g2)
    if args.gc_freeze:
        gc.collect()
        gc.freeze()
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
