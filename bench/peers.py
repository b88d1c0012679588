"""tidings beside the queues a user would otherwise pick (issue 7), on one workload shape.

    python bench/peers.py [--quick] [--messages N] [--postgres-dsn DSN]

Needs the peers: ``pip install -e '.[peers]'`` (huey, persist-queue, procrastinate); a peer
that is missing is reported as an error and the others still run.

The shape, for every system: M messages over 100 queues (tidings: conversations), each
published in its own transaction; then every message is taken, handled by writing one
transcript row, and acknowledged. Throughput is M over the wall time from the first publish to
the last acknowledgment. SQLite runs in WAL with ``synchronous=FULL`` for everyone (huey's
``fsync=True``; persist-queue's own connection settings, noted in the JSON); PostgreSQL is the
same server for tidings and procrastinate, each in a scratch database.

* tidings: ``Outbox`` -- 16 publishes in flight (its async API; the store group-commits
  them), then 8 consumers claiming up to 16 per lease and acknowledging each lease with the
  transcript row *in the same transaction* (``consume``);
* huey (SQLite): ``SqliteHuey`` -- enqueue M tasks, then ``dequeue`` + ``execute`` in one loop;
  the task writes its transcript row in its own transaction (a second commit per message);
* persist-queue (SQLite): ``SQLiteAckQueue`` -- ``put`` M items, then ``get``, write the
  transcript row (own transaction), ``ack``;
* procrastinate (PostgreSQL): ``defer_async`` M jobs, then ``run_worker_async(wait=False,
  concurrency=8)``; the job writes its transcript row through a connection pool.

The raw single-row commit rate of each database is measured in the same run (the baseline),
and tidings' throughput is divided by each peer's. The last stdout line is one JSON object with
``sqlite_vs_huey``, ``sqlite_vs_persist_queue``, ``pg_vs_procrastinate`` and every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
from harness import (
    DEFAULT_DSN,
    Results,
    fmt,
    guarded,
    raw_sqlite_commit_us,
    run_main,
    scratch_url,
    source_revision,
)
from rich.console import Console
from rich.table import Table

from tidings.records import operations
from tidings.records.outbox import Outbox, OutboxConfig
from tidings.store import Tx

QUEUES = 100
IN_FLIGHT = 16
CONSUMERS = 8
GOALS = {"huey": 2.0, "persist_queue": 2.0, "procrastinate": 5.0}


def _transcript_sqlite(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE IF NOT EXISTS transcript (n INTEGER, body TEXT)")
    return conn


def _write_row(conn: sqlite3.Connection, n: int) -> None:
    conn.execute("BEGIN")
    conn.execute("INSERT INTO transcript VALUES (?, ?)", (n, f"handled {n}"))
    conn.execute("COMMIT")


# -- tidings ---------------------------------------------------------------------------------------


async def run_tidings(url: str, messages: int) -> dict[str, Any]:
    convs = [f"conv-{i:03d}" for i in range(QUEUES)]
    config = OutboxConfig(backlog_limit=max(10_000, messages))
    async with Outbox.open(url, config=config) as ob:
        gate = asyncio.Semaphore(IN_FLIGHT)

        async def publish(n: int) -> None:
            conv = convs[n % QUEUES]
            signal = ob.signal(conv, "job.exited", {"n": n, "body": f"message {n}"})
            async with gate:
                await ob.store.transact(lambda tx: ob.publish_signal(tx, signal), route=conv)

        def transcript_row(tx: Tx, conv: str) -> None:
            operations.accept(tx, ob.instance, "turn", conv)

        t0 = time.perf_counter()
        await asyncio.gather(*(publish(n) for n in range(messages)))
        t1 = time.perf_counter()
        handled = 0
        pending = list(convs)

        async def consumer() -> None:
            nonlocal handled
            while pending:
                conv = pending.pop()
                while True:
                    lease = await ob.claim(conv, max_count=16)
                    if not lease.deliveries:
                        break
                    # The transcript row commits with the acknowledgment.
                    await ob.consume(lease, functools.partial(transcript_row, conv=conv),
                                     failure_code="turn_failed")
                    handled += len(lease.deliveries)

        await asyncio.gather(*(consumer() for _ in range(CONSUMERS)))
        t2 = time.perf_counter()
    if handled != messages:
        raise RuntimeError(f"tidings handled {handled} of {messages}")
    return {"messages": messages, "publish_s": t1 - t0, "consume_s": t2 - t1,
            "messages_per_s": messages / (t2 - t0)}


# -- huey ------------------------------------------------------------------------------------------


def run_huey(folder: str, messages: int) -> dict[str, Any]:
    from huey import SqliteHuey

    huey = SqliteHuey(filename=os.path.join(folder, "huey.db"), results=False, fsync=True,
                      journal_mode="wal")
    transcript = _transcript_sqlite(os.path.join(folder, "transcript.db"))

    @huey.task()  # type: ignore[untyped-decorator,unused-ignore]
    def handle(n: int) -> None:
        _write_row(transcript, n)

    t0 = time.perf_counter()
    for n in range(messages):
        handle(n)
    t1 = time.perf_counter()
    handled = 0
    while (task := huey.dequeue()) is not None:
        huey.execute(task)
        handled += 1
    t2 = time.perf_counter()
    count = transcript.execute("SELECT count(*) FROM transcript").fetchone()[0]
    transcript.close()
    if handled != messages or count != messages:
        raise RuntimeError(f"huey handled {handled}, wrote {count}, of {messages}")
    return {"messages": messages, "publish_s": t1 - t0, "consume_s": t2 - t1,
            "messages_per_s": messages / (t2 - t0)}


# -- persist-queue ---------------------------------------------------------------------------------


def run_persist_queue(folder: str, messages: int) -> dict[str, Any]:
    import persistqueue

    queue = persistqueue.SQLiteAckQueue(os.path.join(folder, "pq"), auto_commit=True,
                                        multithreading=False)
    transcript = _transcript_sqlite(os.path.join(folder, "transcript.db"))
    t0 = time.perf_counter()
    for n in range(messages):
        queue.put({"n": n, "queue": n % QUEUES, "body": f"message {n}"})
    t1 = time.perf_counter()
    handled = 0
    while True:
        try:
            item = queue.get(block=False)
        except persistqueue.Empty:
            break
        _write_row(transcript, int(item["n"]))
        queue.ack(item)
        handled += 1
    t2 = time.perf_counter()
    count = transcript.execute("SELECT count(*) FROM transcript").fetchone()[0]
    transcript.close()
    if handled != messages or count != messages:
        raise RuntimeError(f"persist-queue handled {handled}, wrote {count}, of {messages}")
    return {"messages": messages, "publish_s": t1 - t0, "consume_s": t2 - t1,
            "messages_per_s": messages / (t2 - t0)}


# -- procrastinate ---------------------------------------------------------------------------------


async def run_procrastinate(url: str, messages: int) -> dict[str, Any]:
    import procrastinate
    from psycopg_pool import AsyncConnectionPool

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))
    pool = AsyncConnectionPool(url, min_size=2, max_size=CONSUMERS + 2, open=False)

    @app.task(name="handle", queue="bench")  # type: ignore[untyped-decorator,unused-ignore]
    async def handle(n: int) -> None:
        async with pool.connection() as conn:
            await conn.execute("INSERT INTO transcript VALUES (%s, %s)", (n, f"handled {n}"))

    await pool.open()
    try:
        async with pool.connection() as conn:
            await conn.execute("CREATE TABLE IF NOT EXISTS transcript (n integer, body text)")
        async with app.open_async():
            await app.schema_manager.apply_schema_async()
            t0 = time.perf_counter()
            for n in range(messages):
                await handle.defer_async(n=n)
            t1 = time.perf_counter()
            await app.run_worker_async(queues=["bench"], wait=False, concurrency=CONSUMERS)
            t2 = time.perf_counter()
        async with pool.connection() as conn:
            row = await (await conn.execute("SELECT count(*) FROM transcript")).fetchone()
            count = row[0] if row else 0
    finally:
        await pool.close()
    if count != messages:
        raise RuntimeError(f"procrastinate wrote {count} of {messages}")
    return {"messages": messages, "publish_s": t1 - t0, "consume_s": t2 - t1,
            "messages_per_s": messages / (t2 - t0)}


def raw_pg_commit_us(dsn: str, seconds: float) -> float:
    with psycopg.connect(dsn, autocommit=False) as conn:
        conn.execute("CREATE TEMP TABLE raw_commit (n integer)")
        conn.commit()
        count, end = 0, time.perf_counter() + seconds
        t0 = time.perf_counter()
        while time.perf_counter() < end:
            conn.execute("INSERT INTO raw_commit VALUES (1)")
            conn.commit()
            count += 1
        return (time.perf_counter() - t0) / count * 1e6


# -- the run ---------------------------------------------------------------------------------------


async def main_async(args: argparse.Namespace) -> int:
    messages = args.messages or (2_000 if args.quick else 10_000)
    started = time.perf_counter()
    results = Results()
    results.figures["raw_sqlite_commit_us"] = raw_sqlite_commit_us(1.0)
    with contextlib.suppress(psycopg.Error):
        results.figures["raw_pg_commit_us"] = raw_pg_commit_us(args.postgres_dsn, 1.0)

    async def tidings_sqlite() -> dict[str, Any]:
        async with scratch_url("sqlite", args.postgres_dsn, "peers") as url:
            return await run_tidings(url, messages)

    async def tidings_pg() -> dict[str, Any]:
        async with scratch_url("postgres", args.postgres_dsn, "peers") as url:
            return await run_tidings(url, messages)

    async def huey() -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="peers-huey-") as folder:
            return await asyncio.to_thread(run_huey, folder, messages)

    async def persist_queue() -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="peers-pq-") as folder:
            return await asyncio.to_thread(run_persist_queue, folder, messages)

    async def procrastinate() -> dict[str, Any]:
        async with scratch_url("postgres", args.postgres_dsn, "procrastinate") as url:
            return await run_procrastinate(url, messages)

    for name, step in (("tidings_sqlite", tidings_sqlite), ("huey", huey),
                       ("persist_queue", persist_queue), ("tidings_pg", tidings_pg),
                       ("procrastinate", procrastinate)):
        figure = await guarded(results, name, step)
        if figure is not None:
            results.figures[name] = figure

    def rate(name: str) -> float | None:
        value = results.figures.get(name, {}).get("messages_per_s")
        return float(value) if value else None

    def ratio(ours: str, theirs: str) -> float | None:
        a, b = rate(ours), rate(theirs)
        return a / b if a and b else None

    summary: dict[str, Any] = {
        "sqlite_vs_huey": ratio("tidings_sqlite", "huey"),
        "sqlite_vs_persist_queue": ratio("tidings_sqlite", "persist_queue"),
        "pg_vs_procrastinate": ratio("tidings_pg", "procrastinate"),
        "seconds": round(time.perf_counter() - started, 1),
        "errors": results.errors,
        "figures": results.figures,
        "settings": {"messages": messages, "queues": QUEUES, "in_flight": IN_FLIGHT,
                     "consumers": CONSUMERS, "command": " ".join(sys.argv),
                     "revision": source_revision()},
    }
    print_table(results, messages, summary)
    print(json.dumps(summary))
    return 1 if results.errors else 0


def print_table(results: Results, messages: int, summary: dict[str, Any]) -> None:
    out = Console(file=sys.stdout, width=110)
    table = Table(title=f"{messages:,} messages over {QUEUES} queues: publish each, then take, "
                        "write a transcript row, acknowledge")
    table.add_column("system")
    table.add_column("database")
    table.add_column("messages/s", justify="right")
    table.add_column("publish s", justify="right")
    table.add_column("consume s", justify="right")
    table.add_column("tidings / peer", justify="right")
    table.add_column("goal", justify="right")
    rows = (("tidings", "SQLite", "tidings_sqlite", None),
            ("huey", "SQLite", "huey", "sqlite_vs_huey"),
            ("persist-queue", "SQLite", "persist_queue", "sqlite_vs_persist_queue"),
            ("tidings", "PostgreSQL", "tidings_pg", None),
            ("procrastinate", "PostgreSQL", "procrastinate", "pg_vs_procrastinate"))
    for system, database, key, ratio_key in rows:
        f = results.figures.get(key, {})
        goal = GOALS.get(key)
        table.add_row(system, database, fmt(f.get("messages_per_s"), 0),
                      fmt(f.get("publish_s"), 2), fmt(f.get("consume_s"), 2),
                      fmt(summary.get(ratio_key), 1) if ratio_key else "",
                      f"≥ {goal}" if goal else "")
    table.add_row("raw commit", "SQLite", fmt(1e6 / results.figures["raw_sqlite_commit_us"], 0),
                  "", "", "", "baseline")
    if results.figures.get("raw_pg_commit_us"):
        table.add_row("raw commit", "PostgreSQL",
                      fmt(1e6 / results.figures["raw_pg_commit_us"], 0), "", "", "", "baseline")
    out.print(table)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="2,000 messages")
    parser.add_argument("--messages", type=int, default=0)
    parser.add_argument("--postgres-dsn", default=DEFAULT_DSN)
    return parser.parse_args(argv)


def main() -> int:
    return run_main(main_async, parse_args())


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    raise SystemExit(main())
