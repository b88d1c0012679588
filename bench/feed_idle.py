"""What idle watchers cost: the CPU of a ``tidings serve`` process with 200 open event feeds
on which nothing happens.

    python bench/feed_idle.py [--quick] [--watchers 200] [--seconds 60]
                              [--backend sqlite|postgres|both] [--postgres-dsn DSN]

Per backend, ``tidings serve`` runs in a process of its own (SQLite: a file in a temp folder;
PostgreSQL: a scratch database created and dropped through ``--postgres-dsn``) with the
scripted model. ``--watchers`` conversations are created over the API; then, nothing posted:

1. the server with no watcher, after a settle (3 s quick, 5 s full): its CPU over the window;
2. one SSE watcher per conversation (``GET /v1/conversations/{id}/events``, read by httpx in
   this process, one connection each), every one answered 200, then a settle, then the
   server's CPU over the window again.

The window is ``--seconds`` (15 quick, 60 full). The server's CPU is user + system time of its
process (every thread) from ``/proc/<pid>/stat``, as a percentage of one CPU over the window.
At the end every watcher must still be connected, its stream unbroken, and (the window and
settle being longer than the feed's 15 s keep-alive) have had at least one keep-alive ping:
the run fails loudly otherwise.

Keys: ``feed_idle_cpu_pct_200`` (goal <= 2) and ``feed_idle_cpu_pct_0`` on SQLite,
``pg_feed_idle_cpu_pct_200`` and ``pg_feed_idle_cpu_pct_0`` on PostgreSQL (the server process
alone; the PostgreSQL processes' CPU over the same windows -- this database's backends and the
server's background processes -- is under ``figures`` as ``postgres_cpu_pct``), with the raw
single-row commit p50s of the same run beside them (``sqlite_raw_commit_p50_us``,
``pg_raw_commit_p50_us``). The keys are named after 200 watchers whatever ``--watchers`` is;
the number is under ``settings``.

Progress goes to stderr; stdout ends with one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from a2a_resume import Server  # tidings serve in a process of its own
from harness import (
    PostgresCpu,
    Results,
    bench_arguments,
    finish,
    guarded,
    log,
    process_cpu_s,
    raw_commits,
    run_main,
    scratch_url,
)

CONFIG = """
[models.echo]
provider = "scripted"

[profiles.worker]
model = "echo"
"""
HEADERS = {"Authorization": "Bearer tok-a"}
GOAL_PCT = 2.0
PING_S = 15.0
"""The feed's keep-alive interval (the server's default)."""
WAIT_S = 60.0


@dataclass
class Watcher:
    """One open feed as this process reads it."""

    conversation_id: str
    status: int | None = None
    events: int = 0
    pings: int = 0
    error: str | None = None
    ended: bool = False


async def read_feed(http: httpx.AsyncClient, base: str, watcher: Watcher) -> None:
    """Read the conversation's feed until cancelled; what came, and how it ended."""
    try:
        async with http.stream("GET", f"{base}/v1/conversations/{watcher.conversation_id}"
                               "/events", headers={**HEADERS, "Accept": "text/event-stream"}
                               ) as response:
            watcher.status = response.status_code
            if response.status_code != 200:
                watcher.error = f"status {response.status_code}"
                return
            async for line in response.aiter_lines():
                if line.startswith(":"):
                    watcher.pings += 1
                elif line.startswith("data:"):
                    watcher.events += 1
        watcher.ended = True
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        watcher.error = f"{type(exc).__name__}: {exc}"


@contextlib.asynccontextmanager
async def served(url: str, config: Path) -> AsyncIterator[Server]:
    server = await asyncio.to_thread(Server, url, config)
    try:
        yield server
    finally:
        await asyncio.to_thread(server.stop)


async def create_conversations(http: httpx.AsyncClient, base: str, n: int) -> list[str]:
    gate = asyncio.Semaphore(16)

    async def one() -> str:
        async with gate:
            response = await http.post(f"{base}/v1/conversations", json={"profile": "worker"},
                                       headers=HEADERS)
            response.raise_for_status()
            return str(response.json()["conversation_id"])

    return list(await asyncio.gather(*(one() for _ in range(n))))


async def window(pid: int, seconds: float, dbname: str | None) -> dict[str, Any]:
    """The server's CPU over ``seconds`` (and PostgreSQL's, for a database): % of one CPU."""
    pg0 = PostgresCpu.sample() if dbname is not None else None
    client0 = time.process_time()
    cpu0, t0 = process_cpu_s(pid), time.monotonic()
    await asyncio.sleep(seconds)
    cpu1, t1 = process_cpu_s(pid), time.monotonic()
    out: dict[str, Any] = {
        "cpu_pct": round(100 * (cpu1 - cpu0) / (t1 - t0), 3),
        "cpu_s": round(cpu1 - cpu0, 3),
        "window_s": round(t1 - t0, 2),
        "client_cpu_pct": round(100 * (time.process_time() - client0) / (t1 - t0), 3),
    }
    if pg0 is not None and dbname is not None:
        spent = PostgresCpu.sample().since(pg0, dbname)
        out["postgres_cpu_pct"] = round(
            100 * (spent["database"] + spent["background"]) / (t1 - t0), 3)
        out["postgres_database_cpu_pct"] = round(100 * spent["database"] / (t1 - t0), 3)
    return out


async def measure(backend: str, dsn: str, config: Path, watchers: int, seconds: float,
                  settle: float) -> dict[str, Any]:
    async with scratch_url(backend, dsn, "feedidle") as url, served(url, config) as server:
        pid = server.process.pid
        dbname = url.rsplit("/", 1)[1] if backend == "postgres" else None
        limits = httpx.Limits(max_connections=watchers + 20,
                              max_keepalive_connections=watchers + 20)
        timeout = httpx.Timeout(WAIT_S, read=PING_S * 4)
        async with httpx.AsyncClient(limits=limits, timeout=timeout) as http:
            conversations = await create_conversations(http, server.url, watchers)
            log(f"{backend}: {len(conversations)} conversations; no watcher, settling "
                f"{settle:.0f} s, then {seconds:.0f} s measured")
            await asyncio.sleep(settle)
            idle = await window(pid, seconds, dbname)
            log(f"{backend}: 0 watchers: {idle['cpu_pct']:.2f} % of a CPU")

            feeds = [Watcher(c) for c in conversations]
            opened = time.monotonic()
            tasks = [asyncio.create_task(read_feed(http, server.url, w)) for w in feeds]
            try:
                deadline = opened + WAIT_S
                while any(w.status is None and w.error is None for w in feeds):
                    if time.monotonic() > deadline:
                        raise RuntimeError("watchers not answered within a minute")
                    await asyncio.sleep(0.05)
                connect_s = time.monotonic() - opened
                refused = [w for w in feeds if w.error is not None]
                if refused:
                    raise RuntimeError(f"{len(refused)} watchers refused: {refused[0].error}")
                log(f"{backend}: {watchers} watchers connected in {connect_s:.1f} s; settling "
                    f"{settle:.0f} s, then {seconds:.0f} s measured")
                await asyncio.sleep(settle)
                busy = await window(pid, seconds, dbname)
                log(f"{backend}: {watchers} watchers: {busy['cpu_pct']:.2f} % of a CPU")
                connected_s = time.monotonic() - opened
                broken = [w for w in feeds if w.error is not None or w.ended]
                if broken:
                    first = broken[0]
                    raise RuntimeError(f"{len(broken)} of {watchers} watchers lost their feed "
                                       f"(first: {first.error or 'ended'})")
                unpinged = [w for w in feeds if w.pings == 0]
                if connected_s > PING_S + 1 and unpinged:
                    raise RuntimeError(f"{len(unpinged)} of {watchers} watchers had no "
                                       f"keep-alive in {connected_s:.0f} s")
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "cpu_pct_0": idle["cpu_pct"], "cpu_pct_watchers": busy["cpu_pct"],
        "idle": idle, "watched": busy, "watchers": watchers,
        "connect_s": round(connect_s, 2), "connected_s": round(connected_s, 1),
        "pings": sum(w.pings for w in feeds), "events": sum(w.events for w in feeds),
    }


async def main_async(args: argparse.Namespace) -> int:
    seconds = args.seconds or (15.0 if args.quick else 60.0)
    settle = 3.0 if args.quick else 5.0
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    started = time.perf_counter()
    results = Results()
    await raw_commits(results, backends, args.postgres_dsn)
    with tempfile.TemporaryDirectory(prefix="tidings-bench-feedidle-") as folder:
        config = Path(folder) / "tidings.toml"
        config.write_text(CONFIG, "utf-8")
        for backend in backends:
            figure = await guarded(results, backend, functools.partial(
                measure, backend, args.postgres_dsn, config, args.watchers, seconds, settle))
            if figure is not None:
                results.figures[backend] = figure
    sqlite = results.figures.get("sqlite", {})
    pg = results.figures.get("postgres", {})
    return finish(results, started, {
        "feed_idle_cpu_pct_200": sqlite.get("cpu_pct_watchers"),
        "feed_idle_cpu_pct_0": sqlite.get("cpu_pct_0"),
        "pg_feed_idle_cpu_pct_200": pg.get("cpu_pct_watchers"),
        "pg_feed_idle_cpu_pct_0": pg.get("cpu_pct_0"),
        "feed_idle_cpu_goal_pct": GOAL_PCT,
    }, {"watchers": args.watchers, "seconds": seconds, "settle_s": settle,
        "quick": args.quick})


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = bench_arguments(__doc__)
    parser.add_argument("--watchers", type=int, default=200,
                        help="conversations, one watcher each (default 200)")
    parser.add_argument("--seconds", type=float, default=0.0,
                        help="each measured window (default 60, 15 with --quick)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(run_main(main_async, parse_args()))
