"""The background-task benchmark (issue #4). So far: result envelopes.

    python bench/tasks.py [--quick] [--backend sqlite|postgres|both] [--postgres-dsn DSN]

Measured now, on each backend:

1. envelope -- seal a 2 MiB envelope (AES-256-GCM under an HKDF-derived key) and store it, then
   read it back page by page (64 KiB pages that never split a UTF-8 code point): MB of
   plaintext per second for the round trip, and for sealing+storing and reading+paging apart.
   The baseline is the raw speed of AES-256-GCM on the same 2 MiB, measured in the same run.

Not measured yet (the tasks and notifications of issue #4 are not built): the wake latency from a
process's exit to its notification and to the woken turn's model call. Their keys
(``sqlite_wake_ratio_p50``, ``pg_wake_ratio_p50``) are printed as null until they are.

Progress goes to stderr; stdout gets a table and, last, one JSON line with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import secrets
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import psycopg
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from harness import Results, err, fmt, guarded, log, pg_url, source_revision
from rich.console import Console
from rich.table import Table

from tidings.clock import SystemClock
from tidings.results import MasterKey, ResultsConfig
from tidings.results import Results as Envelopes
from tidings.store import Store, open_store

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
ENVELOPE_BYTES = 2 * 1024 * 1024
PAGE_BYTES = 64 * 1024
GOAL_MB_S = 100.0
out = Console(highlight=False, width=120)


@dataclass(frozen=True)
class Plan:
    name: str
    rounds: int


QUICK = Plan("quick", rounds=30)
FULL = Plan("full", rounds=150)


def payload() -> bytes:
    # Process output as it comes: mostly ASCII, some multi-byte text, a little of everything.
    line = "step 42: compiled café.o ✓ in 0.3 s — naïve 🚀 ok\n".encode()
    return (line * (ENVELOPE_BYTES // len(line) + 1))[:ENVELOPE_BYTES - 3] + b"end"


@contextlib.asynccontextmanager
async def scratch_store(backend: str, dsn: str) -> AsyncIterator[Store]:
    if backend == "sqlite":
        folder = tempfile.mkdtemp(prefix="tidings-bench-tasks-")
        store = await open_store(os.path.join(folder, "tasks.db"))
        try:
            yield store
        finally:
            await store.close()
            shutil.rmtree(folder, ignore_errors=True)
        return
    name = f"tidings_bench_tasks_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        store = await open_store(pg_url(dsn, name))
        try:
            yield store
        finally:
            await store.close()
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def raw_aes_mb_s(data: bytes, rounds: int) -> float:
    aes = AESGCM(secrets.token_bytes(32))
    t0 = time.perf_counter()
    for _ in range(rounds):
        nonce = secrets.token_bytes(12)
        aes.decrypt(nonce, aes.encrypt(nonce, data, b"aad"), b"aad")
    return len(data) * rounds / (time.perf_counter() - t0) / 1e6


async def envelope(backend: str, dsn: str, plan: Plan) -> dict[str, Any]:
    data = payload()
    async with scratch_store(backend, dsn) as store:
        results = Envelopes(store, SystemClock(), MasterKey.generate(), ResultsConfig())
        seal_s = read_s = 0.0
        pages = 0
        for _ in range(plan.rounds):
            t0 = time.perf_counter()
            ref = await results.put("conv_bench", data)
            t1 = time.perf_counter()
            offset: int | None = 0
            total = 0
            while offset is not None:
                page = await results.page("conv_bench", ref.result_id, offset=offset,
                                          limit_bytes=PAGE_BYTES)
                end = page.size_bytes if page.next_offset is None else page.next_offset
                total += end - page.offset
                offset = page.next_offset
                pages += 1
            t2 = time.perf_counter()
            assert total == len(data), (total, len(data))
            seal_s += t1 - t0
            read_s += t2 - t1
        moved = len(data) * plan.rounds / 1e6
        return {
            "rounds": plan.rounds,
            "envelope_bytes": len(data),
            "pages_per_envelope": pages / plan.rounds,
            "seal_store_mb_s": moved / seal_s,
            "read_page_mb_s": moved / read_s,
            "round_trip_mb_s": moved / (seal_s + read_s),
        }


async def main_async(args: argparse.Namespace) -> int:
    plan = QUICK if args.quick else FULL
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    started = time.perf_counter()
    results = Results()
    data = payload()
    results.figures["raw_aes_gcm_mb_s"] = raw_aes_mb_s(data, plan.rounds)
    for backend in backends:
        prefix = "sqlite" if backend == "sqlite" else "pg"
        figure = await guarded(results, f"{prefix}_envelope",
                               functools.partial(envelope, backend, args.postgres_dsn, plan))
        if figure is not None:
            results.figures[f"{prefix}_envelope"] = figure
    envelope_rates = [
        results.figures[f"{p}_envelope"]["round_trip_mb_s"]
        for p in ("sqlite", "pg") if f"{p}_envelope" in results.figures
    ]
    summary: dict[str, Any] = {
        "envelope_mb_s": min(envelope_rates) if envelope_rates else None,
        "sqlite_envelope_mb_s": results.figures.get("sqlite_envelope", {}).get("round_trip_mb_s"),
        "pg_envelope_mb_s": results.figures.get("pg_envelope", {}).get("round_trip_mb_s"),
        "raw_aes_gcm_mb_s": results.figures["raw_aes_gcm_mb_s"],
        "sqlite_wake_ratio_p50": None,
        "pg_wake_ratio_p50": None,
    }
    title = f"result envelopes (2 MiB, {PAGE_BYTES // 1024} KiB pages), {plan.name} plan"
    table = Table(title=title)
    for column in ("figure", "SQLite", "PostgreSQL", "goal"):
        table.add_column(column, justify="left" if column == "figure" else "right")
    rows = (("seal + store, MB/s", "seal_store_mb_s", None),
            ("read + page, MB/s", "read_page_mb_s", None),
            ("round trip, MB/s", "round_trip_mb_s", f">= {GOAL_MB_S:.0f}"))
    for label, key, goal in rows:
        values = [results.figures.get(f"{p}_envelope", {}).get(key) for p in ("sqlite", "pg")]
        table.add_row(label, fmt(values[0], 1), fmt(values[1], 1), goal or "")
    table.add_row("raw AES-256-GCM encrypt+decrypt, MB/s (baseline)",
                  fmt(results.figures["raw_aes_gcm_mb_s"], 1), "", "")
    table.add_row("wake latency (tasks not built yet)", "-", "-", "")
    out.print(table)
    seconds = time.perf_counter() - started
    out.print(f"total {seconds:.0f}s")
    line = {**summary, "seconds": round(seconds, 1), "errors": results.errors,
            "figures": results.figures,
            "settings": {"plan": plan.name, "command": " ".join(["python", *sys.argv]),
                         "revision": source_revision()}}
    print(json.dumps(line))
    return 1 if results.errors else 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="the small plan (seconds)")
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--postgres-dsn", default=DEFAULT_DSN)
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args()
    log(f"bench/tasks.py ({'quick' if args.quick else 'full'} plan)")
    err.print("")
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
