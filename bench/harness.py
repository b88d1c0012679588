"""What the benchmarks share: measurement loops, logging, a failure-tolerant step runner, the
machine's CPU counters and the revision measured. Imported by ``bench/*.py`` run as scripts
(their folder is on ``sys.path``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from rich.console import Console

err = Console(stderr=True, highlight=False)

# A bench runs as a script, so its folder leads sys.path -- and bench/a2a.py would then shadow
# the a2a-sdk's ``a2a`` package, which tidings imports. The folder goes last instead: the
# benches' own modules (this one, a2a_resume, ...) are still found, after the installed packages.
_BENCH = Path(__file__).resolve().parent
if sys.path and sys.path[0] and Path(sys.path[0]).resolve() == _BENCH:
    sys.path.append(sys.path.pop(0))


@dataclass
class Results:
    figures: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

def terminate(signum: int, frame: Any) -> None:
    """SIGTERM unwinds like Ctrl-C, so scratch databases and files are still removed."""
    raise KeyboardInterrupt

def time_loop(step: Callable[[], None], seconds: float, samples: list[float]) -> None:
    for _ in range(50):  # warm up: page cache, prepared statements, WAL file
        step()
    end = time.perf_counter() + seconds
    while True:
        t0 = time.perf_counter()
        step()
        t1 = time.perf_counter()
        samples.append(t1 - t0)
        if t1 >= end:
            return

def fmt(value: Any, digits: int = 0) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)

async def guarded(results: Results, name: str, step: Callable[[], Awaitable[Any]]) -> Any:
    """Run one measurement; a failure is recorded (and printed) and the run goes on."""
    log(f"{name} ...")
    t0 = time.perf_counter()
    try:
        value = await step()
    except Exception as exc:
        results.errors[name] = f"{type(exc).__name__}: {exc}"
        err.print(f"[red]{name} failed[/red]")
        traceback.print_exc(file=sys.stderr)
        return None
    log(f"{name} done in {time.perf_counter() - t0:.1f}s")
    return value

def log(message: str) -> None:
    err.print(f"[dim]{time.strftime('%H:%M:%S')}[/dim] {message}")

def machine_cpu_s() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, from /proc/stat."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return (0.0, 0.0)
    tick = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + fields[4]
    return ((sum(fields) - idle) / tick, sum(fields) / tick)

def pct_us(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e6

def pg_url(dsn: str, dbname: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    user = info.get("user", "postgres")
    host = info.get("host", "127.0.0.1")
    port = info.get("port", "5432")
    return f"postgresql://{user}@{host}:{port}/{dbname}"

def source_revision() -> str:
    """The commit measured, with ``+dirty`` when the work tree differs from it."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root,
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")



def now_us() -> int:
    """Wall-clock microseconds (comparable with the runtime's system clock stamps)."""
    return time.time_ns() // 1000


def raw_sqlite_commit_us(seconds: float) -> float:
    """The baseline: median µs of one single-row SQLite commit (WAL, synchronous=FULL)."""
    folder = tempfile.mkdtemp(prefix="tidings-bench-raw-")
    try:
        conn = sqlite3.connect(os.path.join(folder, "raw.db"), isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("CREATE TABLE raw (id INTEGER PRIMARY KEY, v TEXT)")
        samples: list[float] = []
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO raw (v) VALUES ('payload-of-a-small-row')")
            conn.execute("COMMIT")
            samples.append(time.perf_counter() - t0)
        conn.close()
        return statistics.median(samples) * 1e6
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def raw_pg_commit_us(dsn: str, seconds: float) -> float:
    """The PostgreSQL baseline: median µs of one single-row ``INSERT`` + ``COMMIT`` on a plain
    psycopg connection, into a scratch table of ``dsn``'s database (dropped afterwards)."""
    table = f"tidings_bench_raw_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn) as conn:
        conn.execute(f"CREATE TABLE {table} (id bigserial PRIMARY KEY, v text)")
        conn.commit()
        try:
            samples: list[float] = []
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                t0 = time.perf_counter()
                conn.execute(f"INSERT INTO {table} (v) VALUES ('payload-of-a-small-row')")
                conn.commit()
                samples.append(time.perf_counter() - t0)
        finally:
            conn.rollback()
            conn.execute(f"DROP TABLE IF EXISTS {table}")
            conn.commit()
    return statistics.median(samples) * 1e6


def process_cpu_s(pid: int) -> float:
    """A process's CPU time so far (user + system, every thread), from ``/proc/<pid>/stat``;
    0 for a process that is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class PostgresCpu:
    """CPU seconds of the local PostgreSQL server's processes, from ``/proc``: per pid, with
    what each is (``db:<name>`` for a backend or autovacuum worker of that database,
    ``background`` for the postmaster, checkpointer, WAL writer and the like)."""

    by_pid: dict[int, tuple[str, float]]
    reaped_s: float  # the postmaster's children that ended (every database's), from its stat

    @classmethod
    def sample(cls) -> PostgresCpu:
        found: dict[int, tuple[str, float]] = {}
        reaped = 0.0
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                if not stat.split(" (", 1)[1].startswith("postgres)"):
                    continue
                title = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
            except (OSError, IndexError, UnicodeDecodeError):
                continue
            found[int(entry.name)] = (_pg_role(title), process_cpu_s(int(entry.name)))
            if not title.startswith("postgres:"):  # the postmaster
                fields = stat.rsplit(")", 1)[1].split()
                reaped += (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")
        return cls(found, reaped)

    def since(self, before: PostgresCpu, dbname: str) -> dict[str, float]:
        """CPU seconds spent since ``before``: by this database's processes (``database``),
        by the server's background processes (``background``, shared with every database),
        and by other databases' (``others``). A process that ended between the two samples
        is not in those (its time since ``before`` is lost): ``ended`` counts them,
        ``ended_database`` those of this database, and ``ended_s`` is the CPU of every
        process that ended meanwhile, whole lives, any database's."""
        out = {"database": 0.0, "background": 0.0, "others": 0.0, "ended": 0.0,
               "ended_database": 0.0, "ended_s": self.reaped_s - before.reaped_s}
        for pid, (role, cpu) in self.by_pid.items():
            prior = before.by_pid.get(pid)
            spent = cpu - (prior[1] if prior is not None and prior[0] == role else 0.0)
            key = ("database" if role == f"db:{dbname}" else
                   "background" if role == "background" else "others")
            out[key] += spent
        gone = [role for pid, (role, _) in before.by_pid.items() if pid not in self.by_pid]
        out["ended"] = float(len(gone))
        out["ended_database"] = float(sum(1 for role in gone if role == f"db:{dbname}"))
        return out


def _pg_role(title: str) -> str:
    """``background`` or ``db:<name>`` from a PostgreSQL process title, e.g. ``postgres:
    15/main: postgres mydb 127.0.0.1(5000) idle`` or ``postgres: autovacuum worker mydb``."""
    if not title.startswith("postgres:"):
        return "background"  # the postmaster: its command line, not a title
    words = title.split(":", 2)[-1].split()
    if len(words) >= 3 and words[:2] == ["autovacuum", "worker"]:
        return f"db:{words[2]}"
    if len(words) >= 3 and ("(" in words[2] or words[2] == "[local]"):
        return f"db:{words[1]}"
    return "background"


@contextlib.asynccontextmanager
async def scratch_url(backend: str, dsn: str, purpose: str) -> AsyncIterator[str]:
    """A fresh database for one measurement: a SQLite file in a temp folder, or a PostgreSQL
    database created on ``dsn`` and dropped afterwards."""
    if backend == "sqlite":
        folder = tempfile.mkdtemp(prefix=f"tidings-bench-{purpose}-")
        try:
            yield os.path.join(folder, f"{purpose}.db")
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return
    name = f"tidings_bench_{purpose}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield pg_url(dsn, name)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"


async def raw_commits(results: Results, backends: list[str], dsn: str) -> None:
    """The machine's raw single-row commit p50 in this run, for beside a bench's figures:
    ``sqlite_raw_commit_p50_us``, and ``pg_raw_commit_p50_us`` with PostgreSQL in
    ``backends``."""
    results.figures["sqlite_raw_commit_p50_us"] = raw_sqlite_commit_us(1.0)
    if "postgres" in backends:
        raw = await guarded(results, "raw_pg_commit",
                            lambda: asyncio.to_thread(raw_pg_commit_us, dsn, 1.0))
        if raw is not None:
            results.figures["pg_raw_commit_p50_us"] = raw


def finish(results: Results, started: float, line: dict[str, Any],
           settings: dict[str, Any]) -> int:
    """Print a bench's last line: ``line``, the raw commit p50s (:func:`raw_commits`), the
    seconds taken, the errors, every figure and the settings (with the command and the
    revision); the exit status (1 if a step failed)."""
    figures = results.figures
    seconds = time.perf_counter() - started
    raw_pg = figures.get("pg_raw_commit_p50_us")
    line = {**line,
            "sqlite_raw_commit_p50_us": round(figures["sqlite_raw_commit_p50_us"], 1),
            "pg_raw_commit_p50_us": None if raw_pg is None else round(raw_pg, 1),
            "seconds": round(seconds, 1), "errors": results.errors, "figures": figures,
            "settings": {**settings, "command": " ".join(["python", *sys.argv]),
                         "revision": source_revision()}}
    err.print(f"total {seconds:.0f}s")
    print(json.dumps(line))
    return 1 if results.errors else 0


def bench_arguments(doc: str | None) -> argparse.ArgumentParser:
    """A bench's command line: ``--quick``, ``--backend`` and ``--postgres-dsn``."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0] if doc else None)
    parser.add_argument("--quick", action="store_true", help="the small plan (under 2 minutes)")
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--postgres-dsn", default=DEFAULT_DSN)
    return parser


def run_main(main_async: Callable[[argparse.Namespace], Coroutine[Any, Any, int]],
             args: argparse.Namespace) -> int:
    """Run a bench's ``main_async``; Ctrl-C (or SIGTERM) ends it with status 130."""
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(main_async(args))
    return 130
