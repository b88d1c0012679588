"""Scale-out on PostgreSQL (issue 7): 1, 2 and 4 runtime processes on one database serving
1,000 conversations.

    python bench/scale.py [--quick] [--postgres-dsn DSN] [--processes 1,2,4]

For each configuration a fresh scratch database gets 1,000 conversations; then P runtime
processes (``bench/scale_worker.py``) each take every P-th conversation and run closed-loop
users (64 in all, split between the processes) that post a person's words and wait for the
turn that answers it, for the same number of seconds. Figures per configuration: turns per
second over all processes, the ratio to one process (the baseline, measured in the same run),
turn latency p50/p99 (post -> answer committed), the machine's CPU busy share while it ran,
and overlapping turns found afterwards in the database by the crash torture's checker (goal
0). The model is the scripted one, answering at once: what is measured is the kernel and the
database, not a provider.

On a machine with fewer cores than processes, turns per second cannot grow with the processes;
the figure that can hold is the work per CPU. Over the same window the bench reads, from
``/proc``, the CPU time of every runtime process and of PostgreSQL's processes (the backends
of this configuration's database and the server's background processes: postmaster,
checkpointer, WAL writer, ...): turns per CPU-second of the two together, each configuration's
divided by one process's (the efficiency, goal >= 0.85), and PostgreSQL's CPU per turn.

The last stdout line is one JSON object with ``turns_per_s`` per configuration,
``scale_2_ratio``, ``scale_4_ratio``, ``overlapping_turns``, ``pg_scale_cpu_efficiency_2``,
``pg_scale_cpu_efficiency_4``, ``pg_scale_overlapping_turns``, ``pg_cpu_us_per_turn`` and
``turns_per_cpu_s`` per configuration, the raw commit p50s of the same run and the load
average.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from harness import (
    DEFAULT_DSN,
    PostgresCpu,
    Results,
    fmt,
    guarded,
    log,
    machine_cpu_s,
    pct_us,
    process_cpu_s,
    raw_pg_commit_us,
    raw_sqlite_commit_us,
    run_main,
    scratch_url,
    source_revision,
)
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.crash.invariants import check

WORKER = str(Path(__file__).with_name("scale_worker.py"))
CONVERSATIONS = 1_000
USERS = 64
GOALS = {2: 1.6, 4: 2.5}
EFFICIENCY_GOAL = 0.85


async def _spawn(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, WORKER, *args, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        limit=64 * 1024 * 1024,  # a worker's last line holds every latency it measured
    )


def pg_counters(url: str) -> dict[str, int]:
    """The server's WAL position (bytes; every database's WAL), this database's committed
    transactions (cumulative statistics, flushed by each backend within a second or so of
    going idle), the connections to it other than this one, and the server's WAL records and
    full-page images so far (``pg_stat_wal``, flushed the same way)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn, "
            "(SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()), "
            "(SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            " AND pid <> pg_backend_pid()), "
            "(SELECT wal_records FROM pg_stat_wal), (SELECT wal_fpi FROM pg_stat_wal)"
        ).fetchone()
    assert row is not None
    return {"wal_bytes": int(row[0]), "commits": int(row[1]), "connections": int(row[2]),
            "wal_records": int(row[3]), "wal_fpi": int(row[4])}


async def configuration(dsn: str, processes: int, seconds: float) -> dict[str, Any]:
    async with scratch_url("postgres", dsn, f"scale{processes}") as url:
        setup = await _spawn(url, "setup", str(CONVERSATIONS))
        _, err = await setup.communicate()
        if setup.returncode != 0:
            raise RuntimeError(err.decode()[-2000:])
        workers = [await _spawn(url, str(i), str(processes), str(USERS // processes))
                   for i in range(processes)]
        try:
            for worker in workers:
                assert worker.stdout is not None
                line = await asyncio.wait_for(worker.stdout.readline(), 60)
                if not line:
                    assert worker.stderr is not None
                    raise RuntimeError((await worker.stderr.read()).decode()[-2000:])
            await asyncio.sleep(1.5)  # the workers' backends flush their statistics
            counters0 = await asyncio.to_thread(pg_counters, url)
            busy0, total0 = machine_cpu_s()
            pg0, runtime0 = PostgresCpu.sample(), [process_cpu_s(w.pid) for w in workers]
            for worker in workers:
                assert worker.stdin is not None
                worker.stdin.write(f"{seconds}\n".encode())
                await worker.stdin.drain()
            outputs = [json.loads(await asyncio.wait_for(w.stdout.readline(), seconds + 120))
                       for w in workers if w.stdout is not None]
            # Every worker has stopped posting and waits on stdin: nothing of its close counts.
            busy1, total1 = machine_cpu_s()
            pg1, runtime1 = PostgresCpu.sample(), [process_cpu_s(w.pid) for w in workers]
            wal1 = (await asyncio.to_thread(pg_counters, url))["wal_bytes"]
            await asyncio.sleep(1.5)  # as above, for the commit count
            counters1 = await asyncio.to_thread(pg_counters, url)
            for worker in workers:
                assert worker.stdin is not None
                worker.stdin.write(b"\n")
                await worker.stdin.drain()
            for worker in workers:
                await asyncio.wait_for(worker.wait(), 60)
        finally:
            for worker in workers:
                with contextlib.suppress(ProcessLookupError):
                    worker.kill()
        report = check(url)
    latencies = [s for o in outputs for s in o["latencies"]]
    turns = sum(int(o["turns"]) for o in outputs)
    runtime_cpu = sum(b - a for a, b in zip(runtime0, runtime1, strict=True))
    pg = pg1.since(pg0, url.rsplit("/", 1)[1])
    pg_cpu = pg["database"] + pg["background"]
    return {
        "processes": processes,
        "turns": turns,
        "turns_per_s": turns / seconds,
        "latency_p50_ms": pct_us(latencies, 0.5) / 1e3,
        "latency_p99_ms": pct_us(latencies, 0.99) / 1e3,
        "latency_mean_ms": statistics.mean(latencies) * 1e3 if latencies else None,
        "cpu_busy": (busy1 - busy0) / (total1 - total0) if total1 > total0 else None,
        "overlapping_turns": sum(1 for v in report.violations if v.kind == "overlap"),
        "other_violations": [str(v) for v in report.violations if v.kind != "overlap"][:10],
        "per_process_turns": [int(o["turns"]) for o in outputs],
        # CPU seconds over the window, from /proc: the runtime processes, and PostgreSQL's
        # (this database's backends; the background processes, shared with every database on
        # the server; other databases' backends, not counted, only shown).
        "runtime_cpu_s": runtime_cpu,
        "per_process_cpu_s": [b - a for a, b in zip(runtime0, runtime1, strict=True)],
        "pg_database_cpu_s": pg["database"],
        "pg_background_cpu_s": pg["background"],
        "pg_other_databases_cpu_s": pg["others"],
        "pg_processes_ended": int(pg["ended"]),
        "pg_database_processes_ended": int(pg["ended_database"]),
        "pg_ended_processes_cpu_s": pg["ended_s"],
        "turns_per_cpu_s": turns / (runtime_cpu + pg_cpu) if runtime_cpu + pg_cpu else None,
        "runtime_cpu_us_per_turn": runtime_cpu / turns * 1e6 if turns else None,
        "pg_cpu_us_per_turn": pg_cpu / turns * 1e6 if turns else None,
        "pg_database_cpu_us_per_turn": pg["database"] / turns * 1e6 if turns else None,
        # From PostgreSQL itself: transactions per turn (this database's commits, every
        # read-only one too), WAL bytes per turn (the whole server's WAL: other databases'
        # writes on a shared server count too) and the connections the processes held.
        "pg_transactions_per_turn": (counters1["commits"] - counters0["commits"]) / turns
        if turns else None,
        "pg_wal_bytes_per_turn": (wal1 - counters0["wal_bytes"]) / turns if turns else None,
        "pg_connections": counters1["connections"],
        # Full-page images: the first change of each page after a checkpoint (CREATE DATABASE
        # makes one just before) logs the whole 8 KiB page.
        "pg_wal_records_per_turn": (counters1["wal_records"] - counters0["wal_records"]) / turns
        if turns else None,
        "pg_wal_fpi_per_turn": (counters1["wal_fpi"] - counters0["wal_fpi"]) / turns
        if turns else None,
    }


async def main_async(args: argparse.Namespace) -> int:
    seconds = 8.0 if args.quick else 30.0
    counts = [int(p) for p in args.processes.split(",")]
    started = time.perf_counter()
    load_before = os.getloadavg()
    results = Results()
    raw_pg = [raw_pg_commit_us(args.postgres_dsn, 1.0)]
    for processes in counts:
        log(f"{processes} process(es), {seconds:.0f} s")

        async def step(processes: int = processes) -> dict[str, Any]:
            return await configuration(args.postgres_dsn, processes, seconds)

        figure = await guarded(results, f"scale_{processes}", step)
        if figure is not None:
            results.figures[str(processes)] = figure
    raw_pg.append(raw_pg_commit_us(args.postgres_dsn, 1.0))
    raw_sqlite = raw_sqlite_commit_us(1.0)
    base = results.figures.get("1", {}).get("turns_per_s")
    base_cpu = results.figures.get("1", {}).get("turns_per_cpu_s")
    for figure in results.figures.values():
        figure["ratio"] = figure["turns_per_s"] / base if base else None
        figure["cpu_efficiency"] = (figure["turns_per_cpu_s"] / base_cpu
                                    if base_cpu and figure["turns_per_cpu_s"] else None)
    overlapping = sum(f["overlapping_turns"] for f in results.figures.values())
    summary: dict[str, Any] = {
        "turns_per_s": {k: f["turns_per_s"] for k, f in results.figures.items()},
        **{f"scale_{k}_ratio": f["ratio"] for k, f in results.figures.items() if k != "1"},
        "overlapping_turns": overlapping,
        **{f"pg_scale_cpu_efficiency_{k}": f["cpu_efficiency"]
           for k, f in results.figures.items() if k != "1"},
        "pg_scale_overlapping_turns": overlapping,
        "pg_cpu_us_per_turn": {k: f["pg_cpu_us_per_turn"] for k, f in results.figures.items()},
        "turns_per_cpu_s": {k: f["turns_per_cpu_s"] for k, f in results.figures.items()},
        "pg_transactions_per_turn": {k: f["pg_transactions_per_turn"]
                                     for k, f in results.figures.items()},
        "pg_wal_bytes_per_turn": {k: f["pg_wal_bytes_per_turn"]
                                  for k, f in results.figures.items()},
        "pg_connections": {k: f["pg_connections"] for k, f in results.figures.items()},
        "raw_pg_commit_us": sum(raw_pg) / len(raw_pg),
        "raw_sqlite_commit_us": raw_sqlite,
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "seconds": round(time.perf_counter() - started, 1),
        "errors": results.errors,
        "figures": results.figures,
        "settings": {"conversations": CONVERSATIONS, "users": USERS, "run_seconds": seconds,
                     "nproc": os.cpu_count(), "raw_pg_commit_us_before_after": raw_pg,
                     "command": " ".join(sys.argv), "revision": source_revision()},
    }
    print_table(results, seconds, summary)
    print(json.dumps(summary))
    return 1 if results.errors else 0


def background_us(figure: dict[str, Any]) -> float | None:
    """The PostgreSQL background processes' CPU per turn (µs)."""
    turns = figure["turns"]
    return figure["pg_background_cpu_s"] / turns * 1e6 if turns else None


def print_table(results: Results, seconds: float, summary: dict[str, Any]) -> None:
    out = Console(file=sys.stdout, width=150)
    table = Table(title=f"scale-out on PostgreSQL: {CONVERSATIONS:,} conversations, {USERS} "
                        f"closed-loop users, {seconds:.0f} s per configuration")
    table.add_column("processes", justify="right")
    table.add_column("turns/s", justify="right")
    table.add_column("ratio to 1 process", justify="right")
    table.add_column("goal", justify="right")
    table.add_column("p50 ms", justify="right")
    table.add_column("p99 ms", justify="right")
    table.add_column("machine CPU busy", justify="right")
    table.add_column("turns per CPU-s", justify="right")
    table.add_column("efficiency", justify="right")
    table.add_column("runtime CPU µs/turn", justify="right")
    table.add_column("PG CPU µs/turn (db + bg)", justify="right")
    table.add_column("overlapping turns", justify="right")
    for key, f in results.figures.items():
        goal = GOALS.get(int(key))
        table.add_row(key, fmt(f["turns_per_s"], 1), fmt(f["ratio"], 2),
                      f"≥ {goal}" if goal else "baseline", fmt(f["latency_p50_ms"], 1),
                      fmt(f["latency_p99_ms"], 1),
                      f"{f['cpu_busy'] * 100:.0f} %" if f["cpu_busy"] is not None else "-",
                      fmt(f["turns_per_cpu_s"], 1),
                      fmt(f["cpu_efficiency"], 2) + (f" (≥ {EFFICIENCY_GOAL})" if key != "1"
                                                     else ""),
                      fmt(f["runtime_cpu_us_per_turn"]),
                      f"{fmt(f['pg_cpu_us_per_turn'])} ({fmt(f['pg_database_cpu_us_per_turn'])}"
                      f" + {fmt(background_us(f))})",
                      fmt(f["overlapping_turns"]))
    out.print(table)
    for key, f in results.figures.items():
        out.print(f"{key} process(es): PostgreSQL transactions per turn "
                  f"{fmt(f['pg_transactions_per_turn'], 1)}, WAL bytes per turn (the server's) "
                  f"{fmt(f['pg_wal_bytes_per_turn'])} ({fmt(f['pg_wal_records_per_turn'], 1)} "
                  f"records, {fmt(f['pg_wal_fpi_per_turn'], 2)} full pages), connections "
                  f"{f['pg_connections']}, "
                  f"other databases' backends {fmt(f['pg_other_databases_cpu_s'], 2)} CPU-s")
    out.print(f"raw commit p50: PostgreSQL {summary['raw_pg_commit_us']:,.0f} µs (mean of before "
              f"and after), SQLite {summary['raw_sqlite_commit_us']:,.0f} µs; load average "
              f"before {summary['loadavg_before'][0]:.2f}, after "
              f"{summary['loadavg_after'][0]:.2f} ({os.cpu_count()} CPUs)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="8 s per configuration")
    parser.add_argument("--postgres-dsn", default=DEFAULT_DSN)
    parser.add_argument("--processes", default="1,2,4")
    return parser.parse_args(argv)


def main() -> int:
    return run_main(main_async, parse_args())


if __name__ == "__main__":
    raise SystemExit(main())
