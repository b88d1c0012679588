"""The AG-UI figure: how soon an AG-UI client has a piece of the answer (P6).

    python bench/agui.py [--quick] [--streams 10] [--runs 10] [--backend sqlite|postgres|both]
                         [--postgres-dsn DSN]

``tidings serve`` runs in a process of its own on a fresh SQLite file (and, unless
``--backend sqlite``, on a fresh PostgreSQL database), with the scripted model streaming each
answer in 20 pieces 20 ms apart. ``--streams`` conversations at once, each ``--runs`` runs one
after the other: a ``POST /v1/agui`` with a new user message, read by a plain SSE client
(httpx-sse) on loopback in this process, until ``RUN_FINISHED``.

- ``agui_delta_p99_ms``: a piece streamed by the model (or the answer committed) -> this
  client has its ``TEXT_MESSAGE_CONTENT`` (or ``TEXT_MESSAGE_END``). The piece's time is the
  one its event carries (``timestamp``: the server's wall clock as the piece reached its feed,
  in whole milliseconds, so the lag is over-stated by up to 1 ms); the client's is this
  process's wall clock as it parsed the event -- one clock, the machine's. Goal <= 100 ms.
- ``agui_commit_p99_ms``: the same for the committed answers alone (``TEXT_MESSAGE_END``).
- ``feed_delta_p99_ms``: the same turns through the conversation's own event feed (``GET
  .../events`` opened, then ``POST .../inputs``), in turn with the AG-UI runs in each
  conversation, timed from the exact time each event carries: what the adapter adds is the
  difference.

The raw single-row commit p50 of the machine is beside them. Progress goes to stderr; stdout
ends with one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from a2a_resume import Server  # tidings serve in a process of its own
from harness import (
    Results,
    bench_arguments,
    finish,
    guarded,
    log,
    pct_us,
    raw_commits,
    run_main,
    scratch_url,
)
from httpx_sse import connect_sse

CONFIG = """
[models.steps]
provider = "scripted"

[[models.steps.rules]]
when = {{ text_contains = "tell" }}
reply = {{ text = "{}", chunks = 20, chunk_delay = 0.02 }}

[profiles.worker]
model = "steps"
""".format(" ".join(f"piece{i}" for i in range(20)))
HEADERS = {"Authorization": "Bearer tok-a"}
GOAL_MS = 100.0
WAIT_S = 60.0


@contextlib.contextmanager
def served(url: str, config: Path) -> Iterator[Server]:
    server = Server(url, config)
    try:
        yield server
    finally:
        server.stop()


def now_us() -> int:
    return time.time_ns() // 1000


Lags = tuple[list[float], list[float]]
"""The lags (seconds) of a run's pieces, and of its committed answer."""
FINAL = {"completed", "failed", "needs_attention", "stopped"}


def one_run(url: str, thread: str) -> tuple[Lags, int]:
    """One AG-UI run: its lags, and the position its end carries."""
    body = {"threadId": thread, "runId": uuid.uuid4().hex, "messages": [
        {"id": uuid.uuid4().hex, "role": "user", "content": "tell me"}]}
    pieces: list[float] = []
    commits: list[float] = []
    with httpx.Client(timeout=WAIT_S) as http, connect_sse(
            http, "POST", f"{url}/v1/agui", json=body, headers=HEADERS) as source:
        if source.response.status_code != 200:
            raise RuntimeError(f"POST /v1/agui: {source.response.read()!r}")
        for sse in source.iter_sse():
            got = now_us()
            event = json.loads(sse.data)
            kind = event["type"]
            if kind == "TEXT_MESSAGE_CONTENT":
                pieces.append((got - event["timestamp"] * 1000) / 1e6)
            elif kind == "TEXT_MESSAGE_END":
                commits.append((got - event["timestamp"] * 1000) / 1e6)
            elif kind == "RUN_FINISHED":
                return (pieces, commits), int(event["metadata"]["tidings"]["seq"])
    raise RuntimeError(f"the run did not finish: {kind}")


def feed_run(url: str, thread: str, after: int) -> Lags:
    """The same turn through the conversation's own feed (``GET .../events``, then ``POST
    .../inputs``), for comparison: its lags, from the exact times its events carry."""
    pieces: list[float] = []
    commits: list[float] = []
    base = f"{url}/v1/conversations/{thread}"
    with httpx.Client(timeout=WAIT_S) as http, connect_sse(
            http, "GET", f"{base}/events", params={"after": after}, headers=HEADERS) as source:
        http.post(f"{base}/inputs", json={"content": "tell me"},
                  headers=HEADERS).raise_for_status()
        for sse in source.iter_sse():
            got = now_us()
            event = json.loads(sse.data)
            kind = event["type"]
            if kind == "message_delta":
                pieces.append((got - event["at_us"]) / 1e6)
            elif kind == "message_committed" and event["data"]["message"]["role"] == "assistant":
                commits.append((got - event["at_us"]) / 1e6)
            elif kind == "turn_status" and event["data"]["status"] in FINAL:
                return pieces, commits
    raise RuntimeError("the feed ended before the turn")


def lags(done: list[Lags]) -> dict[str, Any]:
    pieces = [lag for p, _ in done for lag in p]
    commits = [lag for _, c in done for lag in c]
    both = pieces + commits
    return {
        "delta_p50_ms": round(pct_us(both, 0.50) / 1000, 2),
        "delta_p99_ms": round(pct_us(both, 0.99) / 1000, 2),
        "delta_max_ms": round(max(both) * 1000, 2),
        "piece_p99_ms": round(pct_us(pieces, 0.99) / 1000, 2),
        "commit_p50_ms": round(pct_us(commits, 0.50) / 1000, 2),
        "commit_p99_ms": round(pct_us(commits, 0.99) / 1000, 2),
        "pieces": len(pieces), "commits": len(commits),
    }


def conversation(url: str) -> str:
    response = httpx.post(f"{url}/v1/conversations", json={"profile": "worker"},
                          headers=HEADERS, timeout=WAIT_S)
    response.raise_for_status()
    return str(response.json()["conversation_id"])


def _measure(url: str, config: Path, streams: int, runs: int) -> dict[str, Any]:
    with served(url, config) as server:
        threads = [conversation(server.url) for _ in range(streams)]
        one_run(server.url, threads[0])  # warm-up, not counted

        def runs_of(thread: str) -> tuple[list[Lags], list[Lags]]:
            agui: list[Lags] = []
            feed: list[Lags] = []
            for _ in range(runs):  # the two ways in turn, so the machine's drift hits both
                got, after = one_run(server.url, thread)
                agui.append(got)
                feed.append(feed_run(server.url, thread, after))
            return agui, feed

        with ThreadPoolExecutor(max_workers=streams) as pool:
            done = list(pool.map(runs_of, threads))
    return {**lags([one for agui, _ in done for one in agui]),
            "feed": lags([one for _, feed in done for one in feed]),
            "streams": streams, "runs": runs}


async def measure(backend: str, dsn: str, config: Path, streams: int,
                  runs: int) -> dict[str, Any]:
    async with scratch_url(backend, dsn, "agui") as url:
        return await asyncio.to_thread(_measure, url, config, streams, runs)


async def main_async(args: argparse.Namespace) -> int:
    streams = args.streams or (8 if args.quick else 20)
    runs = args.runs or (4 if args.quick else 15)
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    started = time.perf_counter()
    results = Results()
    await raw_commits(results, backends, args.postgres_dsn)
    with tempfile.TemporaryDirectory(prefix="tidings-bench-agui-") as folder:
        config = Path(folder) / "tidings.toml"
        config.write_text(CONFIG, "utf-8")
        for backend in backends:
            figure = await guarded(results, backend, functools.partial(
                measure, backend, args.postgres_dsn, config, streams, runs))
            if figure is not None:
                results.figures[backend] = figure
                log(f"{backend}: delta p50 {figure['delta_p50_ms']} ms, p99 "
                    f"{figure['delta_p99_ms']} ms; commit p99 {figure['commit_p99_ms']} ms "
                    f"({figure['pieces']} pieces, {figure['commits']} answers); the feed's "
                    f"own SSE: p99 {figure['feed']['delta_p99_ms']} ms")
    sqlite = results.figures.get("sqlite", {})
    pg = results.figures.get("postgres", {})
    return finish(results, started, {
        "agui_delta_p99_ms": sqlite.get("delta_p99_ms"),
        "agui_delta_p50_ms": sqlite.get("delta_p50_ms"),
        "agui_commit_p99_ms": sqlite.get("commit_p99_ms"),
        "pg_agui_delta_p99_ms": pg.get("delta_p99_ms"),
        "feed_delta_p99_ms": sqlite.get("feed", {}).get("delta_p99_ms"),
        "pg_feed_delta_p99_ms": pg.get("feed", {}).get("delta_p99_ms"),
        "agui_delta_goal_ms": GOAL_MS,
    }, {"streams": streams, "runs": runs})


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = bench_arguments(__doc__)
    parser.add_argument("--streams", type=int, default=0,
                        help="conversations streaming at once (default 20, 8 with --quick)")
    parser.add_argument("--runs", type=int, default=0,
                        help="runs per conversation (default 15, 4 with --quick)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(run_main(main_async, parse_args()))
