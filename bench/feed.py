"""The feed benchmark: how long a piece of an answer takes from the model adapter to a watcher.

    python bench/feed.py [--quick] [--backend sqlite|postgres|both] [--postgres-dsn DSN]
                         [--watchers N]

A model streams each answer as pieces, one every ``--interval-ms``; every piece carries the
wall-clock time at which it was handed to ``on_delta`` (the moment an adapter has received
it). Each watcher stamps what it receives; the latency of a piece is the difference. Measured
on each backend:

1. library -- ``Runtime.watch`` in the process that runs the turn, ``--watchers`` of them on
               one conversation;
2. sse     -- clients of ``GET /v1/conversations/{id}/events`` over loopback, served by the
               same process;
3. peer    -- (PostgreSQL only) the turns run in another process; the watchers (library and
              SSE) are in this one, so every piece crosses the database's NOTIFY.

Progress goes to stderr; stdout gets a table and, last, one JSON line with every figure. The
target is every piece within 100 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from harness import DEFAULT_DSN, err, log, run_main, scratch_url, source_revision

from tidings import FeedEvent, ModelReply, ModelRequest, Profile, Runtime
from tidings.models.base import DeltaCallback
from tidings.service import Server, create_app

OWNER = "alice"
TOKEN = "bench-token"
_STAMP = re.compile(r"<(\d+)>")


def stamp() -> str:
    return f"<{time.time_ns()}>"


class StampModel:
    """Streams ``pieces`` pieces, ``interval`` apart, each stamped with its hand-over time."""

    name = "scripted"

    def __init__(self, pieces: int, interval: float) -> None:
        self.pieces = pieces
        self.interval = interval

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
    ) -> ModelReply:
        text = []
        for index in range(self.pieces):
            if index:
                await asyncio.sleep(self.interval)
            piece = stamp()
            text.append(piece)
            if on_delta is not None:
                on_delta(piece)
        return ModelReply("".join(text), model=request.model)


@dataclass
class Latencies:
    """What one kind of watcher saw: the latency of every stamped piece, in seconds."""

    samples: list[float] = field(default_factory=list)
    pieces: int = 0

    def take(self, text: str) -> None:
        now = time.time_ns()
        for sent in _STAMP.findall(text):
            self.samples.append((now - int(sent)) / 1e9)
            self.pieces += 1

    def figures(self) -> dict[str, float | int]:
        ordered = sorted(self.samples) or [float("nan")]

        def pct(q: float) -> float:
            return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3, 2)

        return {"pieces": self.pieces, "p50_ms": pct(0.5), "p99_ms": pct(0.99),
                "max_ms": round(ordered[-1] * 1e3, 2),
                "within_100ms": round(sum(s <= 0.1 for s in self.samples)
                                      / max(1, len(self.samples)), 4)}


async def library_watch(rt: Runtime, conversation_id: str, into: Latencies,
                        ready: asyncio.Event) -> None:
    feed = rt.watch(conversation_id, owner=OWNER)
    event: FeedEvent
    first = True
    async for event in feed:
        if first:
            ready.set()
            first = False
        if event.type == "message_delta":
            into.take(event.data["text"])


async def sse_watch(client: httpx.AsyncClient, conversation_id: str, into: Latencies,
                    ready: asyncio.Event) -> None:
    async with client.stream("GET", f"/v1/conversations/{conversation_id}/events") as stream:
        ready.set()
        kind = ""
        async for line in stream.aiter_lines():
            if line.startswith("event:"):
                kind = line.partition(":")[2].strip()
            elif line.startswith("data:") and kind == "message_delta":
                into.take(json.loads(line.partition(":")[2])["data"]["text"])


@contextlib.asynccontextmanager
async def serving(rt: Runtime) -> Any:
    server = Server(create_app(rt, tokens={TOKEN: OWNER}), port=0, log_level="warning")
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()  # raise what stopped it
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.should_exit = True
        await task


async def measure(url: str, args: argparse.Namespace, *, peer: bool) -> dict[str, Any]:
    """One database: watchers here; the turns here, or in a peer process."""
    model = StampModel(args.pieces, args.interval_ms / 1000)
    library, sse = Latencies(), Latencies()
    async with Runtime.open(url, models=[model]) as rt, serving(rt) as base:
        conv = (await rt.create_conversation(OWNER, Profile(model="scripted"))).conversation_id
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(base_url=base, headers=headers,
                                     timeout=httpx.Timeout(10, read=None)) as client:
            readies = [asyncio.Event() for _ in range(2 * args.watchers)]
            watchers = [asyncio.create_task(library_watch(rt, conv, library, readies[i]))
                        for i in range(args.watchers)]
            watchers += [asyncio.create_task(sse_watch(client, conv, sse,
                                                       readies[args.watchers + i]))
                         for i in range(args.watchers)]
            await asyncio.gather(*(r.wait() for r in readies))
            if peer:
                await run_peer(url, conv, args)
            else:
                for turn in range(args.turns):
                    await rt.post(conv, f"turn {turn}", owner=OWNER)
                    await rt.settle(conv)
            expected = args.turns * args.pieces * args.watchers
            deadline = time.monotonic() + 10
            while library.pieces < expected or sse.pieces < expected:
                if time.monotonic() > deadline:
                    break  # the pieces not seen by now are counted as missing
                await asyncio.sleep(0.05)
            for task in watchers:
                task.cancel()
            await asyncio.gather(*watchers, return_exceptions=True)
    return {"library": library.figures(), "sse": sse.figures(), "expected": expected}


async def run_peer(url: str, conversation_id: str, args: argparse.Namespace) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--peer", url, conversation_id, "--turns", str(args.turns),
        "--pieces", str(args.pieces), "--interval-ms", str(args.interval_ms),
        stdout=subprocess.DEVNULL,
    )
    if await proc.wait() != 0:
        raise RuntimeError(f"the peer process failed ({proc.returncode})")


async def peer_main(url: str, conversation_id: str, args: argparse.Namespace) -> int:
    """The peer: run the turns, each streaming its pieces, then exit."""
    model = StampModel(args.pieces, args.interval_ms / 1000)
    async with Runtime.open(url, models=[model]) as rt:
        for turn in range(args.turns):
            await rt.post(conversation_id, f"turn {turn}", owner=OWNER)
            await rt.settle(conversation_id)
    return 0


def table(results: dict[str, Any]) -> None:
    print(f"{'backend':<10} {'where':<8} {'watcher':<8} {'pieces':>7} {'p50 ms':>8} "
          f"{'p99 ms':>8} {'max ms':>8} {'≤100ms':>7}")
    for backend, places in results.items():
        for where, figures in places.items():
            for watcher in ("library", "sse"):
                f = figures[watcher]
                print(f"{backend:<10} {where:<8} {watcher:<8} {f['pieces']:>7} "
                      f"{f['p50_ms']:>8} {f['p99_ms']:>8} {f['max_ms']:>8} "
                      f"{f['within_100ms']:>7.2%}")


async def main_async(args: argparse.Namespace) -> int:
    if args.peer:
        url, conversation_id = args.peer
        return await peer_main(url, conversation_id, args)
    backends: Sequence[str] = ("sqlite", "postgres") if args.backend == "both" \
        else (args.backend,)
    results: dict[str, Any] = {}
    for backend in backends:
        results[backend] = {}
        places = ("local", "peer") if backend == "postgres" else ("local",)
        for place in places:
            log(f"{backend} {place}: {args.turns} turns x {args.pieces} pieces, "
                f"{args.watchers} library + {args.watchers} SSE watchers")
            async with scratch_url(backend, args.postgres_dsn, f"feed_{place}") as url:
                results[backend][place] = await measure(url, args, peer=place == "peer")
    table(results)
    worst = max((f[w]["max_ms"] for places in results.values() for f in places.values()
                 for w in ("library", "sse")), default=float("nan"))
    print(json.dumps({"bench": "feed", "revision": source_revision(), "turns": args.turns,
                      "pieces": args.pieces, "interval_ms": args.interval_ms,
                      "watchers": args.watchers, "results": results,
                      "worst_ms": worst, "median_of_p50_ms": statistics.median(
                          f[w]["p50_ms"] for places in results.values()
                          for f in places.values() for w in ("library", "sse"))}))
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="the small plan (seconds)")
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--postgres-dsn", default=DEFAULT_DSN)
    parser.add_argument("--watchers", type=int, default=10,
                        help="library watchers, and as many SSE clients, of one conversation")
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--pieces", type=int, default=50, help="pieces per answer")
    parser.add_argument("--interval-ms", type=float, default=10.0,
                        help="between two pieces of an answer")
    parser.add_argument("--peer", nargs=2, metavar=("URL", "CONVERSATION"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.turns, args.pieces, args.watchers = 3, 20, min(args.watchers, 3)
    return args


def main() -> int:
    args = parse_args()
    if not args.peer:
        err.print("[dim]feed bench: pieces stamped at the adapter, received by watchers[/]")
    return run_main(main_async, args)


if __name__ == "__main__":
    sys.exit(main())
