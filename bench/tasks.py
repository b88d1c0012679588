"""The background-task benchmark (issue #4): wake latency and result envelopes.

    python bench/tasks.py [--quick] [--backend sqlite|postgres|both] [--postgres-dsn DSN]

Measured now, on each backend:

1. envelope -- seal a 2 MiB envelope (AES-256-GCM under an HKDF-derived key) and store it, then
   read it back page by page (64 KiB pages that never split a UTF-8 code point): MB of
   plaintext per second for the round trip, and for sealing+storing and reading+paging apart.
   The baseline is the raw speed of AES-256-GCM on the same 2 MiB, measured in the same run.

2. wake -- a conversation's model starts ``sleep 0.05`` as a background task and ends its turn;
   when the process exits, the runtime records it, delivers the notification and wakes the
   conversation. Measured from the process's exit (as the supervisor saw it) to (a) the
   notification's commit and (b) the woken turn's model call; p50 and p99, with 1 task at a
   time and with 200 concurrent tasks (200 conversations). ``wake_ratio_p50`` is (b)'s p50
   over one raw single-row SQLite commit (synchronous=FULL) measured in the same run.

Progress goes to stderr; stdout gets a table and, last, one JSON line with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import secrets
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from harness import (
    DEFAULT_DSN,
    Results,
    err,
    fmt,
    guarded,
    log,
    now_us,
    raw_pg_commit_us,
    raw_sqlite_commit_us,
    scratch_url,
    source_revision,
)
from rich.console import Console
from rich.table import Table

from tidings.clock import SystemClock
from tidings.models.base import DeltaCallback, ModelReply, ModelRequest, ToolCall
from tidings.records.results import MasterKey, ResultsConfig
from tidings.records.results import Results as Envelopes
from tidings.runtime.root import Runtime, RuntimeConfig
from tidings.scheduler.coordinator import CoordinatorConfig
from tidings.store import Store, open_store
from tidings.types import Message, Profile

ENVELOPE_BYTES = 2 * 1024 * 1024
PAGE_BYTES = 64 * 1024
GOAL_MB_S = 100.0
out = Console(highlight=False, width=120)


@dataclass(frozen=True)
class Plan:
    name: str
    rounds: int
    serial_tasks: int
    concurrent_tasks: int


QUICK = Plan("quick", rounds=30, serial_tasks=30, concurrent_tasks=200)
FULL = Plan("full", rounds=150, serial_tasks=150, concurrent_tasks=200)


def payload() -> bytes:
    # Process output as it comes: mostly ASCII, some multi-byte text, a little of everything.
    line = "step 42: compiled café.o ✓ in 0.3 s — naïve 🚀 ok\n".encode()
    return (line * (ENVELOPE_BYTES // len(line) + 1))[:ENVELOPE_BYTES - 3] + b"end"


@contextlib.asynccontextmanager
async def scratch_store(backend: str, dsn: str) -> AsyncIterator[Store]:
    async with scratch_url(backend, dsn, "tasks") as url:
        store = await open_store(url)
        try:
            yield store
        finally:
            await store.close()


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


class Starter:
    """Starts ``sleep`` in the background on a person's word; notes when a notification is
    read. Everything else is answered at once."""

    name = "starter"

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
    ) -> ModelReply:
        newest = request.messages[-1]
        if newest.meta.get("kind") == "task_notification":
            self.seen[str(newest.meta["task_key"])] = now_us()
            return ModelReply("noted")
        if newest.role == "user":
            return ModelReply("", (ToolCall("c", "shell", {
                "command": "sleep 0.05", "background": True}),))
        return ModelReply("started")


async def wake(backend: str, dsn: str, tasks: int, concurrent: bool) -> dict[str, Any]:
    async with contextlib.AsyncExitStack() as stack:
        url = await stack.enter_async_context(scratch_url(backend, dsn, "wake"))
        model = Starter()
        config = RuntimeConfig(coordinator=CoordinatorConfig(max_concurrent_turns=256))
        rt = await stack.enter_async_context(Runtime.open(url, models=[model], config=config))
        exits: dict[str, int] = {}
        rt.background.observers.append(
            lambda task_key, outcome: exits.__setitem__(task_key, outcome.ended_at_us)
        )
        profile = Profile(model="starter", tools=("shell",))
        count = tasks if concurrent else 1
        convs = [(await rt.create_conversation("bench", profile)).conversation_id
                 for _ in range(count)]

        read_to: dict[str, int] = {}
        """Each conversation's last message read: the transcript is read a page at a time."""

        async def one(conv: str) -> None:
            await rt.post(conv, "go")
            deadline = time.monotonic() + 60
            while True:
                # Done when the model has read this task's notification (in a woken turn, or
                # in the same turn when the process ended before its result committed).
                await rt.settle(conv)
                messages = await rt.transcript(conv, after_seq=read_to.get(conv, 0))
                if messages:
                    read_to[conv] = messages[-1].seq
                if any(m.content == "noted" for m in messages):
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the notification of {conv} was never read")
                await asyncio.sleep(0.005)

        if concurrent:
            await asyncio.gather(*(one(c) for c in convs))
        else:
            for _ in range(tasks):
                await one(convs[0])
        committed: list[float] = []
        called: list[float] = []
        async def whole(conv: str) -> list[Message]:
            messages: list[Message] = []
            while page := await rt.transcript(conv, after_seq=messages[-1].seq if messages else 0):
                messages.extend(page)
            return messages

        for conv in convs:
            for m in await whole(conv):
                key = m.meta.get("task_key") if m.meta.get("kind") == "task_notification" else None
                if isinstance(key, str) and key in exits and key in model.seen:
                    committed.append(m.created_at_us - exits[key])
                    called.append(model.seen[key] - exits[key])
        committed.sort()
        called.sort()

        def pct(xs: list[float], q: float) -> float:
            return xs[min(len(xs) - 1, int(q * len(xs)))]

        return {
            "tasks": len(called),
            "committed_p50_us": pct(committed, 0.5), "committed_p99_us": pct(committed, 0.99),
            "called_p50_us": pct(called, 0.5), "called_p99_us": pct(called, 0.99),
        }


async def main_async(args: argparse.Namespace) -> int:
    plan = QUICK if args.quick else FULL
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    started = time.perf_counter()
    results = Results()
    data = payload()
    results.figures["raw_aes_gcm_mb_s"] = raw_aes_mb_s(data, plan.rounds)
    results.figures["raw_sqlite_commit_us"] = raw_sqlite_commit_us(1.0)
    if "postgres" in backends:
        raw_pg = await guarded(results, "raw_pg_commit",
                               functools.partial(asyncio.to_thread, raw_pg_commit_us,
                                                 args.postgres_dsn, 1.0))
        if raw_pg is not None:
            results.figures["raw_pg_commit_us"] = raw_pg
    for backend in backends:
        prefix = "sqlite" if backend == "sqlite" else "pg"
        figure = await guarded(results, f"{prefix}_envelope",
                               functools.partial(envelope, backend, args.postgres_dsn, plan))
        if figure is not None:
            results.figures[f"{prefix}_envelope"] = figure
        for label, concurrent, count in (("1", False, plan.serial_tasks),
                                         (str(plan.concurrent_tasks), True,
                                          plan.concurrent_tasks)):
            figure = await guarded(
                results, f"{prefix}_wake_{label}",
                functools.partial(wake, backend, args.postgres_dsn, count, concurrent),
            )
            if figure is not None:
                results.figures[f"{prefix}_wake_{label}"] = figure
    raw_us = results.figures["raw_sqlite_commit_us"]
    envelope_rates = [
        results.figures[f"{p}_envelope"]["round_trip_mb_s"]
        for p in ("sqlite", "pg") if f"{p}_envelope" in results.figures
    ]
    summary: dict[str, Any] = {
        "envelope_mb_s": min(envelope_rates) if envelope_rates else None,
        "sqlite_envelope_mb_s": results.figures.get("sqlite_envelope", {}).get("round_trip_mb_s"),
        "pg_envelope_mb_s": results.figures.get("pg_envelope", {}).get("round_trip_mb_s"),
        "raw_aes_gcm_mb_s": results.figures["raw_aes_gcm_mb_s"],
        "sqlite_wake_ratio_p50": _ratio(results.figures.get("sqlite_wake_1"), raw_us),
        "pg_wake_ratio_p50": _ratio(results.figures.get("pg_wake_1"), raw_us),
        "raw_sqlite_commit_us": raw_us,
        # Absolute figures (the goals are set against a floor measured beside them).
        "sqlite_wake_p50_us": results.figures.get("sqlite_wake_1", {}).get("called_p50_us"),
        "pg_wake_p50_us": results.figures.get("pg_wake_1", {}).get("called_p50_us"),
        "sqlite_raw_commit_p50_us": raw_us,
        "pg_raw_commit_p50_us": results.figures.get("raw_pg_commit_us"),
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
    out.print(table)
    wake_table = Table(title=f"wake latency from the process's exit (µs), raw SQLite commit "
                             f"{raw_us:,.0f} µs")
    for column in ("figure", "SQLite", "PostgreSQL", "goal"):
        wake_table.add_column(column, justify="left" if column == "figure" else "right")
    for label in ("1", str(plan.concurrent_tasks)):
        for key, what in (("committed", "notification committed"),
                          ("called", "woken model call")):
            for q in ("p50", "p99"):
                values = [results.figures.get(f"{p}_wake_{label}", {}).get(f"{key}_{q}_us")
                          for p in ("sqlite", "pg")]
                wake_table.add_row(f"{label} task(s): {what} {q}", fmt(values[0]),
                                   fmt(values[1]), "")
    wake_table.add_row("wake_ratio_p50 (1 task, model call p50 / raw commit)",
                       fmt(summary["sqlite_wake_ratio_p50"], 1),
                       fmt(summary["pg_wake_ratio_p50"], 1), "<= 5")
    out.print(wake_table)
    seconds = time.perf_counter() - started
    out.print(f"total {seconds:.0f}s")
    line = {**summary, "seconds": round(seconds, 1), "errors": results.errors,
            "figures": results.figures,
            "settings": {"plan": plan.name, "command": " ".join(["python", *sys.argv]),
                         "revision": source_revision()}}
    print(json.dumps(line))
    return 1 if results.errors else 0


def _ratio(figure: dict[str, Any] | None, raw_us: float) -> float | None:
    return None if figure is None else float(figure["called_p50_us"]) / raw_us


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
