"""The outbox benchmark: every figure is a ratio to the raw commit rate of the same database.

    python bench/outbox.py [--quick] [--backend sqlite|postgres|both]
                           [--postgres-dsn DSN] [--synchronous FULL|NORMAL]

Measured in one run, on each backend (see bench/README.md for the method of each):

1. raw     -- single-row commits per second of a plain connection (the baseline), measured
              before and after the outbox figures; their mean is the denominator;
2. e2e_1   -- one conversation, unbatched: publish -> claim(max_count=1) -> consume (ack plus one
              operation row in the same transaction), serially;
3. e2e_100 -- 100 conversations, concurrent producers and consumers in one process, claims of
              16, consumers woken by ``Outbox.wakeups()``; a small grid of concurrency levels,
              the best one reported; as many messages as ``bench/floor.py`` measures for the
              same figure (10,000 after 2,000 of warm-up in the quick plan): a shorter run
              leaves out the checkpoints and the tables' growth that a longer one pays for, and
              its quotient over the floor would flatter;
4. claim flatness -- p50 of ``claim(max_count=16)`` with 100,000 vs 1,000 ready deliveries in
              the claimed conversation (each claim acked and 16 re-published, untimed, so the
              depth stays put), median of three interleaved runs;
5. churn (PostgreSQL) -- claim p50 before and after 20,000 acknowledged messages in one
              conversation;
6. memory -- peak RSS growth of a fresh process while it fills 100,000 ready deliveries and
              claims once.

Progress goes to stderr; stdout gets a table and, last, one JSON line with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import gc
import json
import os
import platform
import resource
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from harness import (
    DEFAULT_DSN,
    Results,
    fmt,
    guarded,
    log,
    machine_cpu_s,
    pg_url,
    source_revision,
    terminate,
    time_loop,
)
from rich.console import Console
from rich.table import Table

from tidings import Lease, Outbox, OutboxConfig, Published, Tx
from tidings.records import operations
from tidings.support.policy import encode_json

BIG_BACKLOG = 1_000_000
CLAIM_COUNT = 16

out = Console(highlight=False, width=140)


# -- settings ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """How long and how big each measurement is; ``--quick`` picks the small plan."""

    name: str
    raw_seconds: float
    e2e1_warmup: int
    e2e1_seconds: float
    e2e100_conversations: int
    e2e100_warmup: int
    e2e100_messages: int
    e2e100_grid: tuple[tuple[int, int], ...]  # (producers in flight, consumers)
    e2e100_confirm: bool  # measure the best setting of the grid once more, report that run
    flat_small: int
    flat_large: int
    flat_runs: int
    flat_samples: int  # per run, at most
    flat_seconds: float  # per run, at most
    flat_warmup: int
    churn_messages: int
    churn_batch: int  # 1: publish/claim/ack cycles; more: bulk chunks claimed in batches of it
    churn_chunk: int  # messages per bulk chunk when churn_batch > 1
    churn_depth: int
    churn_samples: int
    fill: str  # "publish" (through the API) or "bulk" (set-based SQL, same rows)


FULL = Plan(
    name="full",
    raw_seconds=5.0,
    e2e1_warmup=100,
    e2e1_seconds=10.0,
    e2e100_conversations=100,
    e2e100_warmup=5_000,  # bench/floor.py's full plan
    e2e100_messages=40_000,
    e2e100_grid=((100, 4), (100, 16), (100, 64), (25, 16)),
    e2e100_confirm=True,
    flat_small=1_000,
    flat_large=100_000,
    flat_runs=3,
    flat_samples=200,
    flat_seconds=8.0,
    flat_warmup=40,
    churn_messages=20_000,
    churn_batch=1,
    churn_chunk=0,
    churn_depth=100,
    churn_samples=150,
    fill="publish",
)

QUICK = Plan(
    name="quick",
    raw_seconds=1.5,
    e2e1_warmup=30,
    e2e1_seconds=2.5,
    e2e100_conversations=100,
    e2e100_warmup=2_000,  # bench/floor.py's quick plan: the same figure, the same length
    e2e100_messages=10_000,
    e2e100_grid=((100, 4), (100, 16)),
    e2e100_confirm=False,
    flat_small=1_000,
    flat_large=100_000,
    flat_runs=3,
    flat_samples=40,
    flat_seconds=1.5,
    flat_warmup=20,
    churn_messages=20_000,
    churn_batch=100,
    churn_chunk=2_000,
    churn_depth=100,
    churn_samples=40,
    fill="bulk",
)


def payload(n: int) -> dict[str, Any]:
    """A small signal payload, the size of a real 'task exited' observation."""
    return {"task_key": f"task-{n:06d}", "exit_code": 0, "ref": f"res_{n:08x}"}


def p50_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


# -- databases -----------------------------------------------------------------------------------


@dataclass
class Backend:
    """One database kind: makes a scratch database per measurement and drops it after."""

    name: str  # "sqlite" | "postgres"
    key: str  # JSON prefix: "sqlite" | "pg"
    synchronous: str
    admin_dsn: str
    workdir: Path
    made: list[str] = field(default_factory=list)

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

    def store_options(self, **extra: Any) -> dict[str, Any]:
        if self.name == "sqlite":
            return {"synchronous": self.synchronous, **extra}
        return dict(extra)


@contextlib.asynccontextmanager
async def open_outbox(
    backend: Backend, url: str, *, backlog_limit: int = BIG_BACKLOG, **store_extra: Any
) -> AsyncIterator[Outbox]:
    config = OutboxConfig(backlog_limit=backlog_limit)
    async with Outbox.open(
        url, config=config, store_options=backend.store_options(**store_extra)
    ) as ob:
        yield ob


async def publish_one(ob: Outbox, conv: str, n: int) -> Published:
    # Validated and encoded before the unit, as a careful producer does: off the writer. A
    # signal with nothing else to commit is published alone (PostgreSQL: one statement).
    return await ob.publish_alone(ob.signal(conv, "task.exited", payload(n)))


async def publish_many(ob: Outbox, conv: str, start: int, count: int) -> None:
    def unit(tx: Tx) -> None:
        for n in range(start, start + count):
            ob.publish(tx, conv, "task.exited", payload(n))

    await ob.store.transact(unit)


async def consume_with_row(ob: Outbox, lease: Lease, conv: str) -> None:
    """Ack the lease with one extra row (an accepted operation) in the same transaction."""
    await ob.consume(
        lease, lambda tx: operations.accept(tx, ob.instance, "turn", conv),
        failure_code="turn_failed",
    )


async def ack(ob: Outbox, lease: Lease) -> None:
    await ob.store.transact(lambda tx: ob.ack(tx, lease))


# -- 1. raw commits ------------------------------------------------------------------------------


def raw_commits(backend: Backend, url: str, seconds: float) -> dict[str, float]:
    """Serial single-row commits on a plain connection: the database's own commit rate."""
    samples: list[float] = []
    if backend.name == "sqlite":
        conn = sqlite3.connect(url, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {backend.synchronous}")
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
    return {"commits_per_s": len(samples) / sum(samples), "p50_us": p50_us(samples)}


# -- 2. e2e, one conversation, unbatched -------------------------------------------------------


async def e2e_one(backend: Backend, url: str, plan: Plan) -> dict[str, float]:
    conv = "conv-e2e-1"
    async with open_outbox(backend, url) as ob:

        async def one(n: int, stages: list[list[float]] | None) -> None:
            t0 = time.perf_counter()
            await publish_one(ob, conv, n)
            t1 = time.perf_counter()
            lease = await ob.claim(conv, max_count=1)
            t2 = time.perf_counter()
            if len(lease.deliveries) != 1:
                raise RuntimeError(f"e2e_1 claimed {len(lease.deliveries)} deliveries, not 1")
            await consume_with_row(ob, lease, conv)
            t3 = time.perf_counter()
            if stages is not None:
                for bucket, value in zip(stages, (t1 - t0, t2 - t1, t3 - t2, t3 - t0),
                                         strict=True):
                    bucket.append(value)

        for n in range(plan.e2e1_warmup):
            await one(n, None)
        stages: list[list[float]] = [[], [], [], []]
        start = time.perf_counter()
        end = start + plan.e2e1_seconds
        n = plan.e2e1_warmup
        while time.perf_counter() < end:
            await one(n, stages)
            n += 1
        elapsed = time.perf_counter() - start
        stats = await ob.stats(conv)
        if stats.backlog != 0:
            raise RuntimeError(f"e2e_1 left a backlog of {stats.backlog}")
    count = len(stages[3])
    return {
        "messages": count,
        "messages_per_s": count / elapsed,
        "publish_p50_us": p50_us(stages[0]),
        "claim_p50_us": p50_us(stages[1]),
        "consume_p50_us": p50_us(stages[2]),
        "message_p50_us": p50_us(stages[3]),
    }


# -- 3. e2e, 100 conversations, concurrent -------------------------------------------------------


class Dispatcher:
    """What a runtime does: wake-ups mark conversations due; one consumer per conversation at a
    time claims up to 16 and acks them with its turn's row, and claims again until a claim comes
    back empty. A watchdog re-queues everything if progress stalls (a missed wake-up)."""

    def __init__(self, ob: Outbox, conversations: list[str]) -> None:
        self.ob = ob
        self.conversations = set(conversations)
        self.due: asyncio.Queue[str] = asyncio.Queue()
        self.scheduled: set[str] = set()
        self.dirty: set[str] = set()
        self.acked = 0
        self.target = 0
        self.done = asyncio.Event()
        self.claims = 0
        self.empty_claims = 0

    def schedule(self, conv: str) -> None:
        if conv in self.scheduled:
            self.dirty.add(conv)
        else:
            self.scheduled.add(conv)
            self.due.put_nowait(conv)

    async def listen(self, wakeups: asyncio.Queue[str]) -> None:
        while True:
            conv = await wakeups.get()
            if conv in self.conversations:
                self.schedule(conv)

    async def consumer(self) -> None:
        ob = self.ob
        while True:
            conv = await self.due.get()
            self.dirty.discard(conv)
            lease = await ob.claim(conv, max_count=CLAIM_COUNT)
            self.claims += 1
            taken = len(lease.deliveries)
            if taken:
                await consume_with_row(ob, lease, conv)
                self.acked += taken
                if self.acked >= self.target:
                    self.done.set()
            else:
                self.empty_claims += 1
            # A wake-up comes only when a queue goes from empty to non-empty: drain until a
            # claim comes back empty.
            if taken or conv in self.dirty:
                self.dirty.discard(conv)
                self.due.put_nowait(conv)
            else:
                self.scheduled.discard(conv)

    async def watchdog(self) -> None:
        last = -1
        while True:
            await asyncio.sleep(1.0)
            if self.acked == last:
                for conv in self.conversations:
                    self.schedule(conv)
            last = self.acked


async def e2e_many(
    backend: Backend, plan: Plan, producers: int, consumers: int, url: str
) -> dict[str, float | None]:
    convs = [f"conv-{i:03d}" for i in range(plan.e2e100_conversations)]
    # Both stores group-commit whatever is queued; PostgreSQL keeps its default writers.
    extra: dict[str, Any] = {}
    async with open_outbox(backend, url, **extra) as ob, ob.wakeups() as wakeups:
        dispatcher = Dispatcher(ob, convs)
        in_flight = asyncio.Semaphore(producers)

        async def produce(conv: str, start: int, count: int) -> None:
            for n in range(start, start + count):
                async with in_flight:
                    await publish_one(ob, conv, n)

        helpers = [
            asyncio.create_task(dispatcher.listen(wakeups)),
            asyncio.create_task(dispatcher.watchdog()),
            *(asyncio.create_task(dispatcher.consumer()) for _ in range(consumers)),
        ]

        async def phase(messages: int, offset: int) -> float:
            per = messages // len(convs)
            dispatcher.target = dispatcher.acked + per * len(convs)
            dispatcher.done.clear()
            t0 = time.perf_counter()
            producing = asyncio.gather(*(produce(conv, offset, per) for conv in convs))
            finished = asyncio.create_task(dispatcher.done.wait())
            watched: set[asyncio.Future[Any]] = {producing, finished, *helpers}
            while not finished.done():
                ended, _ = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
                for task in ended:
                    if task is not finished and task.exception() is not None:
                        finished.cancel()
                        raise RuntimeError("a producer or consumer failed") from task.exception()
                watched -= ended - {finished}
            elapsed = time.perf_counter() - t0
            await producing
            return elapsed
        try:
            await phase(plan.e2e100_warmup, 0)
            groups_before, units_before = _group_counters(ob)
            claims_before, empty_before = dispatcher.claims, dispatcher.empty_claims
            cpu_before, machine_before = process_cpu_s(), machine_cpu_s()
            elapsed = await phase(plan.e2e100_messages, plan.e2e100_warmup)
            cpu_after, machine_after = process_cpu_s(), machine_cpu_s()
            groups_after, units_after = _group_counters(ob)
        finally:
            for task in helpers:
                task.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
        measured = (plan.e2e100_messages // len(convs)) * len(convs)
        stats = await ob.stats()
        if stats.backlog != 0:
            raise RuntimeError(f"e2e_100 left a backlog of {stats.backlog}")
    result: dict[str, float | None] = {
        "producers_in_flight": producers,
        "consumers": consumers,
        "messages": measured,
        "seconds": elapsed,
        "messages_per_s": measured / elapsed,
        "claims": dispatcher.claims - claims_before,
        "empty_claims": dispatcher.empty_claims - empty_before,
        # CPU of this process per message, and the share of the machine's CPUs that were busy
        # (any process: the database server, and whatever else runs on the machine).
        "client_cpu_us_per_message": (cpu_after - cpu_before) / measured * 1e6,
        "machine_busy": _busy_share(machine_before, machine_after),
    }
    if groups_after > groups_before:
        result["units_per_commit"] = (units_after - units_before) / (groups_after - groups_before)
    return result


def process_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _busy_share(before: tuple[float, float], after: tuple[float, float]) -> float | None:
    total = after[1] - before[1]
    return None if total <= 0 else (after[0] - before[0]) / total


def _group_counters(ob: Outbox) -> tuple[int, int]:
    """SQLite's writer counts its shared commits and the units in them."""
    return (
        int(getattr(ob.store, "groups_committed", 0)),
        int(getattr(ob.store, "units_committed", 0)),
    )


# -- 4. claim latency flatness -------------------------------------------------------------------


def bulk_fill(backend: Backend, url: str, conv: str, count: int) -> None:
    """Append ``count`` ready deliveries to a conversation with set-based SQL.

    The rows are the ones ``publish`` writes for a caller that passes its own idempotency keys
    (random event ids, the payload, the next ``count`` queue sequences, the queue row's
    counters), written in one statement per table instead of one publish each, and without
    holding them in this process. The quick plan uses it so that 100,000 rows fit in its time
    budget. Nothing else may write to the conversation meanwhile.
    """
    now_us = time.time_ns() // 1000
    text, size = encode_json(payload(0), "payload", limit_bytes=8192)
    prefix = f"bulk-{uuid.uuid4().hex[:12]}-"
    params = {"conv": conv, "text": text, "size": size, "now": now_us, "n": count,
              "prefix": prefix, "pattern": prefix + "%"}
    deliveries = (
        "INSERT INTO signal_deliveries (event_id, conversation_id, queue_seq, state, attempts, "
        "claimable_at_us, payload_bytes, published_at_us) "
        "SELECT event_id, conversation_id, "
        "coalesce((SELECT last_seq FROM signal_queues WHERE conversation_id = {conv}), 0) "
        "+ row_number() OVER (ORDER BY seq), 'ready', 0, {now}, payload_bytes, published_at_us "
        "FROM signal_events WHERE conversation_id = {conv} AND idempotency_key LIKE {pattern} "
        "ORDER BY seq"
    )
    queue = (
        "INSERT INTO signal_queues AS q (conversation_id, last_seq, backlog) "
        "VALUES ({conv}, {n}, {n}) ON CONFLICT (conversation_id) DO UPDATE "
        "SET last_seq = q.last_seq + {n}, backlog = q.backlog + {n}"
    )
    if backend.name == "sqlite":
        # On SQLite the engine writes each delivery (trigger signal_events_deliver) at the queue
        # row's freshly allocated sequence, so the rows go in one event at a time -- still in
        # one transaction and without publish's Python around them.
        conn = sqlite3.connect(url, isolation_level=None, timeout=30)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "INSERT INTO signal_queues (conversation_id) VALUES (:conv) "
                "ON CONFLICT (conversation_id) DO NOTHING",
                params,
            )
            for i in range(count):
                conn.execute(
                    "UPDATE signal_queues SET last_seq = last_seq + 1, backlog = backlog + 1 "
                    "WHERE conversation_id = :conv",
                    params,
                )
                conn.execute(
                    "INSERT INTO signal_events (event_id, type, operation_id, conversation_id, "
                    "idempotency_key, payload, payload_bytes, schema_version, published_at_us) "
                    "VALUES (:event_id, 'task.exited', NULL, :conv, :key, :text, :size, 1, :now)",
                    {**params, "event_id": f"evt_{uuid.uuid4().hex}", "key": f"{prefix}{i}"},
                )
            conn.execute("COMMIT")
        finally:
            conn.close()
        return
    with psycopg.connect(url) as pconn:
        pconn.execute(
            "INSERT INTO signal_events (event_id, type, operation_id, conversation_id, "
            "idempotency_key, payload, payload_bytes, schema_version, published_at_us) "
            "SELECT 'evt_' || md5(random()::text || g), 'task.exited', NULL, %(conv)s, "
            "%(prefix)s || g, %(text)s, %(size)s, 1, %(now)s "
            "FROM generate_series(1, %(n)s) g ORDER BY g",
            params,
        )
        names = {"conv": "%(conv)s", "now": "%(now)s", "pattern": "%(pattern)s", "n": "%(n)s"}
        pconn.execute(deliveries.format(**names), params)
        pconn.execute(queue.format(**names), params)
        pconn.commit()


async def fill(backend: Backend, ob: Outbox, url: str, conv: str, count: int, how: str) -> float:
    """Put ``count`` ready deliveries in ``conv``; seconds taken. ``publish`` goes through the
    API, 1,000 publishes per unit of work."""
    t0 = time.perf_counter()
    if how == "bulk":
        await asyncio.to_thread(bulk_fill, backend, url, conv, count)
    else:
        for start in range(0, count, 1_000):
            await publish_many(ob, conv, start, min(1_000, count - start))
    elapsed = time.perf_counter() - t0
    stats = await ob.stats(conv)
    if stats.ready < count:
        raise RuntimeError(f"fill left {stats.ready} ready deliveries, not {count}")
    return elapsed


async def claim_samples(
    ob: Outbox, conv: str, *, samples: int, seconds: float, counter: list[int]
) -> list[float]:
    """Time ``claim(max_count=16)``; ack it and re-publish 16 (both untimed) so the depth of the
    conversation does not change from one sample to the next."""
    taken: list[float] = []
    end = time.perf_counter() + seconds
    while len(taken) < samples and (len(taken) < 5 or time.perf_counter() < end):
        t0 = time.perf_counter()
        lease = await ob.claim(conv, max_count=CLAIM_COUNT)
        taken.append(time.perf_counter() - t0)
        if len(lease.deliveries) != CLAIM_COUNT:
            raise RuntimeError(f"claim took {len(lease.deliveries)}, not {CLAIM_COUNT}")
        await ack(ob, lease)
        await publish_many(ob, conv, counter[0], CLAIM_COUNT)
        counter[0] += CLAIM_COUNT
    return taken


async def claim_flatness(
    backend: Backend, small_url: str, large_url: str, plan: Plan
) -> dict[str, Any]:
    """Claim p50 at 1,000 vs 100,000 ready deliveries; the two databases are measured in
    interleaved runs so that drift of the machine hits both alike."""
    conv = "conv-deep"
    async with open_outbox(backend, small_url) as small, open_outbox(backend, large_url) as large:
        fill_small = await fill(backend, small, small_url, conv, plan.flat_small, "publish")
        large_ready = (await large.stats(conv)).ready
        if large_ready < plan.flat_large - CLAIM_COUNT:
            raise RuntimeError(f"the large database holds {large_ready} ready deliveries")
        counters = {"small": [10_000_000], "large": [20_000_000]}
        for name, ob in (("small", small), ("large", large)):
            await claim_samples(ob, conv, samples=plan.flat_warmup, seconds=3.0,
                                counter=counters[name])
        runs: list[dict[str, float]] = []
        for _ in range(plan.flat_runs):
            s = await claim_samples(small, conv, samples=plan.flat_samples,
                                    seconds=plan.flat_seconds, counter=counters["small"])
            lg = await claim_samples(large, conv, samples=plan.flat_samples,
                                     seconds=plan.flat_seconds, counter=counters["large"])
            runs.append({
                "small_p50_us": p50_us(s), "large_p50_us": p50_us(lg),
                "small_samples": len(s), "large_samples": len(lg),
                "flatness": p50_us(lg) / p50_us(s),
            })
        depth_small = (await small.stats(conv)).ready
        depth_large = (await large.stats(conv)).ready
    middle = sorted(runs, key=lambda r: r["flatness"])[len(runs) // 2]
    return {
        "flatness": middle["flatness"],
        "small_p50_us": middle["small_p50_us"],
        "large_p50_us": middle["large_p50_us"],
        "runs": runs,
        "small_depth_end": depth_small,
        "large_depth_end": depth_large,
        "fill_small_s": fill_small,
    }


# -- 6. memory: a fresh process fills 100,000 ready deliveries and claims once ---------------------


def rss_mib() -> float:
    """Peak resident set size of this process so far (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_now_mib() -> float | None:
    """Current resident set size (VmRSS), where /proc has it."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return None


async def memory_probe(backend: Backend, url: str, rows: int, how: str) -> dict[str, Any]:
    """Runs in a child process (``--memory-probe``) so that its peak RSS is its own."""
    conv = "conv-deep"
    async with open_outbox(backend, url) as ob:
        # Warm every path once (imports, prepared statements, caches) before the baseline.
        await publish_one(ob, "conv-warm", 0)
        lease = await ob.claim("conv-warm", max_count=CLAIM_COUNT)
        await ack(ob, lease)
        gc.collect()
        before, now_before = rss_mib(), rss_now_mib()
        fill_seconds = await fill(backend, ob, url, conv, rows, how)
        after_fill = rss_mib()
        tracemalloc.start()
        t0 = time.perf_counter()
        lease = await ob.claim(conv, max_count=CLAIM_COUNT)
        claim_us = (time.perf_counter() - t0) * 1e6
        _, claim_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        after_claim, now_after = rss_mib(), rss_now_mib()
        if len(lease.deliveries) != CLAIM_COUNT:
            raise RuntimeError(f"claim took {len(lease.deliveries)}, not {CLAIM_COUNT}")
        await ack(ob, lease)
        await publish_many(ob, conv, 30_000_000, CLAIM_COUNT)  # back to exactly ``rows``
    return {
        "rows": rows,
        "fill": how,
        "fill_s": fill_seconds,
        "rss_before_mib": before,
        "rss_peak_after_fill_mib": after_fill,
        "rss_peak_after_claim_mib": after_claim,
        "rss_growth_mib": after_claim - before,
        "rss_now_before_mib": now_before,
        "rss_now_after_mib": now_after,
        "claim_tracemalloc_peak_kib": claim_peak / 1024,
        "claim_us": claim_us,
    }


def run_memory_child(backend: Backend, url: str, rows: int, how: str) -> dict[str, Any]:
    command = [
        sys.executable, str(Path(__file__).resolve()), "--memory-probe", url,
        "--backend", backend.name, "--synchronous", backend.synchronous,
        "--rows", str(rows), "--fill", how,
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"memory probe failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# -- 5. churn (PostgreSQL) -----------------------------------------------------------------------


async def churn(backend: Backend, url: str, plan: Plan) -> dict[str, Any]:
    conv = "conv-churn"
    async with open_outbox(backend, url) as ob:
        await fill(backend, ob, url, conv, plan.churn_depth, "publish")
        counter = [1_000_000]
        # Warm up past psycopg's prepare threshold and PostgreSQL's switch to a generic plan
        # on each pooled connection, so "start" is not a cold figure.
        await claim_samples(ob, conv, samples=40, seconds=60, counter=counter)
        start = await claim_samples(ob, conv, samples=plan.churn_samples, seconds=60,
                                    counter=counter)
        t0 = time.perf_counter()
        done = 0
        n = 50_000_000
        while done < plan.churn_messages:
            if plan.churn_batch == 1:  # the real cycle: publish, claim and ack one message
                await publish_one(ob, conv, n)
                n += 1
                lease = await ob.claim(conv, max_count=1)
                await ack(ob, lease)
                done += len(lease.deliveries)
                continue
            # Quick plan: append a chunk by bulk SQL, then claim and ack it in batches.
            chunk = min(plan.churn_chunk, plan.churn_messages - done)
            await asyncio.to_thread(bulk_fill, backend, url, conv, chunk)
            acked = 0
            while acked < chunk:
                lease = await ob.claim(conv, max_count=min(plan.churn_batch, chunk - acked))
                await ack(ob, lease)
                acked += len(lease.deliveries)
            done += acked
        churn_s = time.perf_counter() - t0
        after = await claim_samples(ob, conv, samples=plan.churn_samples, seconds=60,
                                    counter=counter)
        dead = await _pg_dead_tuples(url)
    return {
        "start_p50_us": p50_us(start),
        "after_p50_us": p50_us(after),
        "ratio": p50_us(after) / p50_us(start),
        "messages": done,
        "batch": plan.churn_batch,
        "published_by": "publish" if plan.churn_batch == 1 else f"bulk, {plan.churn_chunk}/chunk",
        "churn_s": churn_s,
        "depth": plan.churn_depth,
        "dead_tuples": dead,
    }


async def _pg_dead_tuples(url: str) -> dict[str, int]:
    def read() -> dict[str, int]:
        with psycopg.connect(url) as conn:
            rows = conn.execute(
                "SELECT relname, n_dead_tup FROM pg_stat_user_tables "
                "WHERE relname IN ('signal_deliveries', 'signal_events', 'signal_queues')"
            ).fetchall()
        return {str(name): int(dead) for name, dead in rows}

    return await asyncio.to_thread(read)


# -- the run -------------------------------------------------------------------------------------


async def bench_backend(backend: Backend, plan: Plan, only: set[str], results: Results) -> None:
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

        return await guarded(results, f"{k}_{name}", go)

    # The raw rate is measured next to each throughput figure (before, between, after), and each
    # ratio uses the mean of the two measurements around it: the machine drifts, and a baseline
    # taken minutes away would flatter or punish a figure by chance.
    if "raw" in only:
        await raw("1")
    if "e2e1" in only:
        value = await scratch_run("e2e_1", lambda url: e2e_one(backend, url, plan))
        if value is not None:
            figures[f"{k}_e2e_1"] = value
        if "raw" in only:
            await raw("2")
            figures[f"{k}_e2e_1_baseline"] = _mean_rate(figures, k, "1", "2")
    if "e2e100" in only:
        configs = []
        for producers, consumers in plan.e2e100_grid:
            name = f"e2e_100_p{producers}_c{consumers}"
            value = await scratch_run(
                name, functools.partial(e2e_many, backend, plan, producers, consumers)
            )
            if value is not None:
                configs.append(value)
                log(f"  producers={producers} consumers={consumers}: "
                    f"{value['messages_per_s']:.0f} msg/s")
        if configs:
            figures[f"{k}_e2e_100_grid"] = configs
            best = max(configs, key=lambda c: c["messages_per_s"])
            if plan.e2e100_confirm:
                # The best of several noisy runs is biased upwards: measure it once more and
                # report that run.
                producers = int(best["producers_in_flight"] or 0)
                consumers = int(best["consumers"] or 0)
                again = await scratch_run(
                    f"e2e_100_p{producers}_c{consumers}_confirm",
                    functools.partial(e2e_many, backend, plan, producers, consumers),
                )
                if again is not None:
                    again["grid_messages_per_s"] = best["messages_per_s"]
                    best = again
            figures[f"{k}_e2e_100"] = best
        if "raw" in only:
            await raw("3")
            first = "2" if "e2e1" in only else "1"
            figures[f"{k}_e2e_100_baseline"] = _mean_rate(figures, k, first, "3")
    if "flatness" in only or "memory" in only:

        async def deep() -> dict[str, Any]:
            with backend.scratch("deep_small") as small, backend.scratch("deep_large") as large:
                memory = await asyncio.to_thread(
                    run_memory_child, backend, large, plan.flat_large, plan.fill
                )
                found: dict[str, Any] = {"memory": memory}
                if "flatness" in only:
                    found["flatness"] = await claim_flatness(backend, small, large, plan)
                return found

        value = await guarded(results, f"{k}_deep", deep)
        if value is not None:
            figures[f"{k}_memory"] = value["memory"]
            if "flatness" in value:
                figures[f"{k}_claim_flatness"] = value["flatness"]
    if "churn" in only and backend.name == "postgres":
        value = await scratch_run("churn", lambda url: churn(backend, url, plan))
        if value is not None:
            figures[f"{k}_churn"] = value
    if "raw" in only:
        if not {"e2e1", "e2e100"} & only:
            await raw("1")
        rates = [figures[f"{k}_raw_{tag}"]["commits_per_s"] for tag in "123"
                 if f"{k}_raw_{tag}" in figures]
        if rates:
            figures[f"{k}_raw_commits_per_s"] = statistics.mean(rates)
            figures[f"{k}_raw_spread"] = max(rates) / min(rates)


def _mean_rate(figures: dict[str, Any], k: str, *tags: str) -> float | None:
    rates = [figures[f"{k}_raw_{tag}"]["commits_per_s"] for tag in tags
             if f"{k}_raw_{tag}" in figures]
    return statistics.mean(rates) if rates else None


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
    with contextlib.suppress(OSError):
        meminfo = Path("/proc/meminfo").read_text().split()
        info["mem_gib"] = round(int(meminfo[1]) / 1024 / 1024, 1)
    return info


def disk_of(path: Path) -> dict[str, Any]:
    """The block device and file system the SQLite files live on."""
    found: dict[str, Any] = {"path": str(path)}
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        df = subprocess.run(["df", "-T", str(path)], capture_output=True, text=True, check=True)
        device, fstype = df.stdout.splitlines()[1].split()[:2]
        found.update(device=device, fstype=fstype)
        name = Path(device).name
        rotational = Path(f"/sys/block/{name}/queue/rotational")
        if rotational.exists():
            found["rotational"] = rotational.read_text().strip() == "1"
    return found


def postgres_settings(dsn: str) -> dict[str, Any]:
    names = ("server_version", "fsync", "synchronous_commit", "wal_sync_method",
             "full_page_writes", "autovacuum", "shared_buffers", "commit_delay")
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT name, setting FROM pg_settings WHERE name = ANY(%s)", (list(names),)
        ).fetchall()
    return {str(name): str(value) for name, value in rows}


def ratio(
    figures: dict[str, Any], key: str, value: float | None, figure: str | None = None
) -> float | None:
    """``value`` over the raw rate measured around ``figure`` (or over the run's mean rate)."""
    raw = figures.get(f"{key}_{figure}_baseline") if figure else None
    raw = raw or figures.get(f"{key}_raw_commits_per_s")
    return None if value is None or not raw else value / raw


def summarize(figures: dict[str, Any]) -> dict[str, Any]:
    """The headline keys of the JSON line."""
    summary: dict[str, Any] = {}
    for key in ("sqlite", "pg"):
        e2e1 = figures.get(f"{key}_e2e_1", {}).get("messages_per_s")
        e2e100 = figures.get(f"{key}_e2e_100", {}).get("messages_per_s")
        summary[f"{key}_e2e_1_ratio"] = ratio(figures, key, e2e1, "e2e_1")
        summary[f"{key}_e2e_100_ratio"] = ratio(figures, key, e2e100, "e2e_100")
        summary[f"{key}_claim_flatness"] = figures.get(f"{key}_claim_flatness", {}).get("flatness")
        summary[f"{key}_raw_commits_per_s"] = figures.get(f"{key}_raw_commits_per_s")
        summary[f"{key}_e2e_1_messages_per_s"] = e2e1
        summary[f"{key}_e2e_100_messages_per_s"] = e2e100
        # Absolute figures (the goals are set against a floor measured beside them).
        summary[f"{key}_e2e_1_msgs"] = e2e1
        summary[f"{key}_e2e_100_msgs"] = e2e100
        summary[f"{key}_cpu_per_msg_us_100"] = figures.get(f"{key}_e2e_100", {}).get(
            "client_cpu_us_per_message")
        raw_p50s = [figures[f"{key}_raw_{tag}"]["p50_us"] for tag in "123"
                    if f"{key}_raw_{tag}" in figures]
        summary[f"{key}_raw_commit_p50_us"] = statistics.mean(raw_p50s) if raw_p50s else None
        summary[f"{key}_peak_memory_growth_mib"] = (
            figures.get(f"{key}_memory", {}).get("rss_growth_mib")
        )
    summary["pg_churn_ratio"] = figures.get("pg_churn", {}).get("ratio")
    return summary


GOALS = {
    "sqlite_e2e_1_ratio": (">=", 0.25),
    "sqlite_e2e_100_ratio": (">=", 2.0),
    "sqlite_claim_flatness": ("<=", 1.25),
    "pg_e2e_1_ratio": (">=", 0.25),
    "pg_e2e_100_ratio": (">=", 1.0),
    "pg_claim_flatness": ("<=", 1.5),
    "pg_churn_ratio": ("<=", 1.5),
}


def met(key: str, value: float | None) -> str:
    if value is None:
        return "[yellow]n/a[/yellow]"
    op, goal = GOALS[key]
    ok = value >= goal if op == ">=" else value <= goal
    return "[green]yes[/green]" if ok else "[red]NO[/red]"


def print_tables(figures: dict[str, Any], summary: dict[str, Any]) -> None:
    table = Table(title="tidings outbox: ratios to the raw commit rate of the same database")
    table.add_column("figure")
    table.add_column("SQLite", justify="right")
    table.add_column("goal", justify="right")
    table.add_column("met")
    table.add_column("PostgreSQL", justify="right")
    table.add_column("goal", justify="right")
    table.add_column("met")

    def row(label: str, name: str) -> None:
        cells: list[str] = [label]
        for key in ("sqlite", "pg"):
            full = f"{key}_{name}"
            value = summary.get(full)
            if full in GOALS:
                op, goal = GOALS[full]
                cells += [fmt(value, 2), f"{op} {goal}", met(full, value)]
            else:
                cells += [fmt(value, 2), "", ""]
        table.add_row(*cells)

    row("e2e, 1 conversation (x raw)", "e2e_1_ratio")
    row("e2e, 100 conversations (x raw)", "e2e_100_ratio")
    row("claim p50 100k / 1k", "claim_flatness")
    table.add_row("churn: claim p50 after / before", "", "", "", fmt(summary["pg_churn_ratio"], 2),
                  "<= 1.5", met("pg_churn_ratio", summary["pg_churn_ratio"]))
    out.print(table)

    raw = Table(title="raw figures")
    raw.add_column("figure")
    raw.add_column("SQLite", justify="right")
    raw.add_column("PostgreSQL", justify="right")

    def get(key: str, *path: str) -> Any:
        value: Any = figures.get(key)
        for part in path:
            value = value.get(part) if isinstance(value, dict) else None
        return value

    lines: list[tuple[str, tuple[str, ...], int]] = [
        ("raw commits/s, before e2e_1", ("raw_1", "commits_per_s"), 0),
        ("raw commits/s, between e2e_1 and e2e_100", ("raw_2", "commits_per_s"), 0),
        ("raw commits/s, after e2e_100", ("raw_3", "commits_per_s"), 0),
        ("raw commits/s, max/min of the three", ("raw_spread",), 2),
        ("raw commit p50 (µs), before e2e_1", ("raw_1", "p50_us"), 0),
        ("baseline of e2e_1 (commits/s)", ("e2e_1_baseline",), 0),
        ("baseline of e2e_100 (commits/s)", ("e2e_100_baseline",), 0),
        ("e2e_1 messages/s", ("e2e_1", "messages_per_s"), 0),
        ("e2e_1 message p50 (µs)", ("e2e_1", "message_p50_us"), 0),
        ("e2e_1 publish p50 (µs)", ("e2e_1", "publish_p50_us"), 0),
        ("e2e_1 claim(1) p50 (µs)", ("e2e_1", "claim_p50_us"), 0),
        ("e2e_1 consume p50 (µs)", ("e2e_1", "consume_p50_us"), 0),
        ("e2e_100 messages/s (best)", ("e2e_100", "messages_per_s"), 0),
        ("e2e_100 best: producers in flight", ("e2e_100", "producers_in_flight"), 0),
        ("e2e_100 best: consumers", ("e2e_100", "consumers"), 0),
        ("e2e_100 best: units per shared commit", ("e2e_100", "units_per_commit"), 1),
        ("e2e_100 best: client CPU per message (µs)",
         ("e2e_100", "client_cpu_us_per_message"), 0),
        ("e2e_100 best: machine CPUs busy (share)", ("e2e_100", "machine_busy"), 2),
        ("claim(16) p50 at 1k (µs)", ("claim_flatness", "small_p50_us"), 0),
        ("claim(16) p50 at 100k (µs)", ("claim_flatness", "large_p50_us"), 0),
        ("churn: claim p50 before (µs)", ("churn", "start_p50_us"), 0),
        ("churn: claim p50 after (µs)", ("churn", "after_p50_us"), 0),
        ("memory: peak RSS growth, fill 100k + claim (MiB)", ("memory", "rss_growth_mib"), 1),
        ("memory: RSS before fill (MiB)", ("memory", "rss_now_before_mib"), 1),
        ("memory: RSS after fill + claim (MiB)", ("memory", "rss_now_after_mib"), 1),
        ("memory: claim tracemalloc peak (KiB)", ("memory", "claim_tracemalloc_peak_kib"), 1),
        ("memory: fill 100k (s)", ("memory", "fill_s"), 1),
    ]
    for label, path, digits in lines:
        raw.add_row(label, fmt(get(f"sqlite_{path[0]}", *path[1:]), digits),
                    fmt(get(f"pg_{path[0]}", *path[1:]), digits))
    out.print(raw)

    for key, title in (("sqlite", "SQLite"), ("pg", "PostgreSQL")):
        grid = figures.get(f"{key}_e2e_100_grid")
        if not grid:
            continue
        t = Table(title=f"{title} e2e_100 concurrency grid")
        for col in ("producers in flight", "consumers", "messages/s", "x raw", "claims",
                    "empty claims", "units/commit", "client CPU µs/msg", "machine busy"):
            t.add_column(col, justify="right")
        for c in grid:
            t.add_row(str(c["producers_in_flight"]), str(c["consumers"]),
                      fmt(c["messages_per_s"]),
                      fmt(ratio(figures, key, c["messages_per_s"], "e2e_100"), 2),
                      str(c["claims"]), str(c["empty_claims"]),
                      fmt(c.get("units_per_commit"), 1),
                      fmt(c.get("client_cpu_us_per_message")), fmt(c.get("machine_busy"), 2))
        out.print(t)


async def main_async(args: argparse.Namespace) -> int:
    plan = QUICK if args.quick else FULL
    if args.fill:
        plan = dataclasses.replace(plan, fill=args.fill)
    only = set(args.only.split(",")) if args.only else {
        "raw", "e2e1", "e2e100", "flatness", "memory", "churn"
    }
    started = time.perf_counter()
    load_before = os.getloadavg()
    results = Results()
    workdir = Path(tempfile.mkdtemp(prefix="tidings-bench-", dir=args.workdir))
    settings: dict[str, Any] = {
        "plan": plan.__dict__,
        "sqlite_synchronous": args.synchronous,
        "sqlite_journal_mode": "WAL",
        "postgres_dsn": args.postgres_dsn,
        "claim_max_count": CLAIM_COUNT,
        "command": " ".join(["python", "bench/outbox.py", *sys.argv[1:]]),
        "revision": source_revision(),
    }
    try:
        backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
        for name in backends:
            backend = Backend(
                name=name, key="sqlite" if name == "sqlite" else "pg",
                synchronous=args.synchronous, admin_dsn=args.postgres_dsn, workdir=workdir,
            )
            if name == "postgres":
                settings["postgres"] = postgres_settings(args.postgres_dsn)
            else:
                settings["sqlite_disk"] = disk_of(workdir)
            log(f"[bold]{name}[/bold] ({plan.name} plan)")
            await bench_backend(backend, plan, only, results)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    summary = summarize(results.figures)
    print_tables(results.figures, summary)
    if results.errors:
        out.print("[red]errors:[/red]")
        for name, message in results.errors.items():
            out.print(f"  {name}: {message}")
    elapsed = time.perf_counter() - started
    out.print(f"total {elapsed:.0f}s, {plan.name} plan, SQLite synchronous={args.synchronous}, "
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
    parser.add_argument("--synchronous", choices=("FULL", "NORMAL"), default="FULL",
                        help="SQLite synchronous setting, for the outbox and the baseline alike")
    parser.add_argument("--fill", choices=("publish", "bulk"),
                        help="how to fill 100,000 ready deliveries (default: publish in the "
                             "full plan, bulk SQL in the quick plan)")
    parser.add_argument("--only", help="comma-separated subset of: raw,e2e1,e2e100,flatness,"
                                       "memory,churn")
    parser.add_argument("--workdir", help="folder for the SQLite files (default: the temp dir)")
    parser.add_argument("--memory-probe", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--rows", type=int, default=100_000, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main() -> int:
    signal.signal(signal.SIGTERM, terminate)
    args = parse_args()
    if args.memory_probe:
        backend = Backend(name=args.backend, key="", synchronous=args.synchronous,
                          admin_dsn=args.postgres_dsn, workdir=Path("."))
        probe = asyncio.run(memory_probe(backend, args.memory_probe, args.rows,
                                         args.fill or "publish"))
        print(json.dumps(probe))
        return 0
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
