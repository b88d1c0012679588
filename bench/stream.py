"""The streaming benchmark: how soon a watcher sees the text a model is generating.

    python bench/stream.py [--quick] [--backend sqlite|postgres|both] [--postgres-dsn DSN]
                           [--chunks 200] [--chunk-ms 5] [--watchers 500]

A model emits its answer as ``--chunks`` pieces, ``--chunk-ms`` apart, each stamped with the
wall clock the moment it hands the piece to the runtime (the adapter "receiving" it). Watchers
are separate OS processes reading the conversation's Server-Sent Events feed over HTTP from a
real server; each stamps every ``message_delta`` it reads. A piece's latency is its reading
minus its stamp (one machine, one clock). A watcher that fell behind may get several pieces in
one delta: each piece counts, at the time the delta carrying it arrived.

* one watcher, then ``--watchers`` watchers on the same conversation (spread over a few client
  processes), SQLite and PostgreSQL;
* on PostgreSQL the watchers read the feed of a second server process opened on the same
  database, while the turn runs in the first one: the deltas cross processes;
* the turn overhead with streaming on and off: the same answer as 200 pieces or as one, the
  per-turn wall time and the commits per turn (streaming must not write per piece).

Progress goes to stderr; stdout gets a table and, last, one JSON line: ``sqlite_delta_p99_ms``,
``pg_delta_p99_ms``, ``sqlite_delta_p99_ms_500``, ``pg_delta_p99_ms_500`` (goal <= 100 ms
each), the p50s, the turn overheads, the raw SQLite commit p50 of the same run, and the
settings.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from harness import (
    Results,
    fmt,
    guarded,
    log,
    raw_sqlite_commit_us,
    run_main,
    scratch_url,
    source_revision,
)
from loopback import free_port
from rich.console import Console
from rich.table import Table

from tidings.models.base import DeltaCallback, ModelReply, ModelRequest
from tidings.runtime.root import Runtime
from tidings.service.app import Server, create_app
from tidings.types import Profile

DEFAULT_DSN = os.environ.get("TIDINGS_TEST_POSTGRES_DSN",
                             "postgresql://postgres@127.0.0.1:5432/test")
TOKEN, PRINCIPAL = "bench-token", "bench"
CLIENT_PROCESSES = 4  # the many watchers are spread over this many client processes


@dataclass(frozen=True)
class Plan:
    name: str
    answers: int  # answers streamed per watcher setting
    overhead_turns: int


QUICK = Plan("quick", answers=2, overhead_turns=60)
FULL = Plan("full", answers=5, overhead_turns=300)


class StreamModel:
    """Answers with ``chunks`` pieces ``delay_s`` apart, stamping each as it is handed over."""

    name = "bench"

    def __init__(self) -> None:
        self.chunks = 200
        self.delay_s = 0.005
        self.stamps: list[tuple[int, int]] = []  # (offset, wall ns) of the answer in progress

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
    ) -> ModelReply:
        self.stamps = []
        text = ""
        start = time.monotonic()
        for i in range(self.chunks):
            # Piece i arrives ``i * delay_s`` after the first, as from a network: when the
            # event loop comes back late, every piece that arrived meanwhile is handed over.
            wait = start + i * self.delay_s - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            piece = f"w{i} "
            if on_delta is not None:
                self.stamps.append((len(text), time.time_ns()))
                on_delta(piece)
            text += piece
        return ModelReply(text=text, model=self.name)



async def wait_http(base: str, seconds: float = 30.0) -> None:
    end = time.monotonic() + seconds
    async with httpx.AsyncClient() as client:
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(f"{base}/health")).status_code < 500:
                    return
            if time.monotonic() > end:
                raise TimeoutError(f"no server at {base}")
            await asyncio.sleep(0.05)


# -- the watcher processes --------------------------------------------------------------------

async def watch_main(base: str, conversation: str, count: int, after: int, out: str,
                     ready: str) -> int:
    """``count`` SSE watchers of one conversation; each stamps what it reads and stops at the
    first committed assistant message. Writes ``{"seen": [[[offset, end, ns], ...], ...],
    "cpu_s": ...}``: the deltas each watcher read, and this process's CPU time while reading.

    While the answer streams a watcher only reads and stamps (one ``read`` per arrival, the
    bytes kept); the chunked framing and the events are decoded once the stream has ended. On a
    2-CPU machine that shares its cores with the server, a client that parses as it reads
    measures itself: 500 watchers parsing every delta cost more CPU than the server sending
    them."""
    host, port = base.removeprefix("http://").split(":")
    path = f"/v1/conversations/{conversation}/events"
    request = (f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n"
               f"Authorization: Bearer {TOKEN}\r\nLast-Event-ID: {after}\r\n\r\n").encode()
    reads: list[list[tuple[int, bytes]]] = [[] for _ in range(count)]
    connected = 0
    all_connected = asyncio.Event()

    async def one(i: int) -> None:
        nonlocal connected
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(head.decode(errors="replace").splitlines()[0])
        mine = reads[i]
        # The feed starts one row back: that row arriving means the server has read this
        # watcher's backlog and serves it live (the answer starts only once every watcher is).
        first = await reader.read(1 << 16)
        mine.append((time.time_ns(), first))
        connected += 1
        if connected == count:
            all_connected.set()
        tail = first[-32:]
        try:
            while True:
                data = await reader.read(1 << 16)
                if not data:
                    return
                mine.append((time.time_ns(), data))
                if b"message_committed" in tail + data and answered(mine):
                    return
                tail = data[-32:]
        finally:
            writer.close()

    tasks = [asyncio.create_task(one(i)) for i in range(count)]
    waiter = asyncio.create_task(all_connected.wait())
    await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED)
    for t in tasks:
        if t.done() and t.exception() is not None:
            raise t.exception()  # type: ignore[misc]
    write_file(ready, "ready")
    cpu0 = time.process_time()
    await asyncio.gather(*tasks)
    cpu_s = time.process_time() - cpu0
    write_file(out, json.dumps({"seen": [deltas(r) for r in reads], "cpu_s": cpu_s}))
    return 0


def sse_events(reads: list[tuple[int, bytes]]) -> list[tuple[bytes, int]]:
    """The SSE events of a chunked response body read as ``reads`` (stamp, bytes), each with
    the stamp of the read that completed it."""
    raw = b"".join(data for _, data in reads)
    ends: list[int] = []
    total = 0
    for _, data in reads:
        total += len(data)
        ends.append(total)
    events: list[tuple[bytes, int]] = []
    body = b""
    pos = 0
    while pos < len(raw):
        eol = raw.find(b"\r\n", pos)
        if eol < 0:
            break
        size = int(raw[pos:eol], 16)
        start = eol + 2
        if size == 0 or start + size > len(raw):
            break
        body += raw[start:start + size]
        pos = start + size + 2
        *complete, body = body.split(b"\r\n\r\n")
        if complete:
            stamp = reads[bisect.bisect_left(ends, start + size)][0]
            events.extend((event, stamp) for event in complete)
    return events


def answered(reads: list[tuple[int, bytes]]) -> bool:
    """Whether the stream so far holds the committed assistant answer."""
    for event, _ in sse_events(reads):
        if b"event: message_committed" in event:
            message = json.loads(event.split(b"data: ", 1)[1])["data"]["message"]
            if message["role"] == "assistant" and not message.get("tool_calls"):
                return True
    return False


def deltas(reads: list[tuple[int, bytes]]) -> list[tuple[int, int, int]]:
    """``(offset, end, stamp)`` of each ``message_delta`` read, then ``(-1, -1, stamp)`` of
    the committed answer (which holds the whole text)."""
    out: list[tuple[int, int, int]] = []
    for event, stamp in sse_events(reads):
        if b"event: message_delta" in event:
            data = json.loads(event.split(b"data: ", 1)[1])["data"]
            start = int(data["offset"])
            out.append((start, start + len(data["text"]), stamp))
        elif b"event: message_committed" in event and b'"role":"assistant"' in event:
            out.append((-1, -1, stamp))
            break
    return out


def write_file(path: str, text: str) -> None:
    Path(path).write_text(text)


def start(argv: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, __file__, *argv])


async def serve_main(url: str, port: int) -> int:
    """A second server process on the same database (PostgreSQL): its feed is what watchers
    read, while the turns run in the first process."""
    async with Runtime.open(url, models=[StreamModel()]) as rt:
        app = create_app(rt, tokens={TOKEN: PRINCIPAL})
        server = Server(app, port=port, log_level="warning",
                        freeze_heap=True)  # as `tidings serve` does
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, lambda: setattr(server, "should_exit", True))
        await server.serve()
    return 0


# -- the driver -------------------------------------------------------------------------------

class Watchers:
    """Client processes holding ``count`` SSE connections to ``base``."""

    def __init__(self, base: str, conversation: str, count: int, after: int, folder: str) -> None:
        self.files: list[tuple[str, str]] = []
        self.cpu_s = 0.0  # the client processes' CPU time while the answer streamed
        self.procs: list[subprocess.Popen[bytes]] = []
        per = [count // CLIENT_PROCESSES + (1 if i < count % CLIENT_PROCESSES else 0)
               for i in range(min(CLIENT_PROCESSES, count))]
        for i, n in enumerate(per):
            out, ready = f"{folder}/watch-{i}.json", f"{folder}/ready-{i}"
            for f in (out, ready):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f)
            self.files.append((out, ready))
            self.procs.append(start(
                ["--watch", base, "--conversation", conversation, "--count", str(n),
                 "--after", str(after), "--out", out, "--ready", ready]))

    async def connected(self, seconds: float = 60.0) -> None:
        end = time.monotonic() + seconds
        while not self.all_ready():
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"a watcher process exited with {p.returncode}")
            if time.monotonic() > end:
                raise TimeoutError("the watchers did not connect")
            await asyncio.sleep(0.02)

    def all_ready(self) -> bool:
        return all(os.path.exists(r) for _, r in self.files)

    def read(self) -> list[list[tuple[int, int, int]]]:
        seen: list[list[tuple[int, int, int]]] = []
        self.cpu_s = 0.0
        for (out, _), p in zip(self.files, self.procs, strict=True):
            if p.returncode != 0:
                raise RuntimeError(f"a watcher process exited with {p.returncode}")
            report = json.loads(Path(out).read_text())
            seen.extend([tuple(x) for x in w] for w in report["seen"])
            self.cpu_s += float(report["cpu_s"])
        return seen

    async def results(self, seconds: float = 120.0) -> list[list[tuple[int, int, int]]]:
        end = time.monotonic() + seconds
        while any(p.poll() is None for p in self.procs):
            if time.monotonic() > end:
                self.kill()
                raise TimeoutError("the watchers never saw the committed answer")
            await asyncio.sleep(0.02)
        return self.read()

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def latencies_ms(stamps: Sequence[tuple[int, int]],
                 seen: list[list[tuple[int, int, int]]]) -> tuple[list[float], int, int]:
    """Each emitted piece, for each watcher: when the delta holding it arrived, minus its
    stamp -- or, for a piece whose delta the commit overtook (another process's NOTIFY of the
    committed answer can arrive before the live one of its last piece), when the committed
    answer holding it arrived. Also the number of (watcher, piece) pairs seen only in the
    commit, and never seen."""
    out: list[float] = []
    at_commit = missing = 0
    for deltas in seen:
        committed = [d[2] for d in deltas if d[0] < 0]
        deltas = sorted((d for d in deltas if d[0] >= 0), key=lambda d: d[2])
        j = 0  # the first delta covering an offset wins
        for offset, stamp in sorted(stamps):
            while j < len(deltas) and deltas[j][1] <= offset:
                j += 1
            if j < len(deltas) and deltas[j][0] <= offset < deltas[j][1]:
                out.append((deltas[j][2] - stamp) / 1e6)
            elif committed:
                out.append((committed[0] - stamp) / 1e6)
                at_commit += 1
            else:
                missing += 1
    return out, at_commit, missing


def cpu_seconds(pid: int | None) -> float:
    """The CPU time (user + system) of a process: this one, or another one from /proc."""
    if pid is None:
        return time.process_time()
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def stream_answers(rt: Runtime, model: StreamModel, base: str, count: int, answers: int,
                         folder: str, peer: int | None) -> dict[str, Any]:
    samples: list[float] = []
    missing = 0
    sends = at_commit = 0
    cpu = {"turn_process_s": 0.0, "serving_process_s": 0.0, "watcher_processes_s": 0.0}
    for _ in range(answers):
        conv = (await rt.create_conversation(PRINCIPAL, Profile(model="bench"))).conversation_id
        after = max(e.seq for e in await rt.events(conv, owner=PRINCIPAL))
        watchers = Watchers(base, conv, count, after - 1, folder)
        try:
            await watchers.connected()
            log(f"    {count} watcher(s) connected; streaming")
            own0, peer0 = time.process_time(), cpu_seconds(peer)
            await rt.post(conv, "stream, please", owner=PRINCIPAL)
            seen = await watchers.results()
            own, served = time.process_time() - own0, cpu_seconds(peer) - peer0
            cpu["turn_process_s"] += own
            cpu["serving_process_s"] += served if peer is not None else own
            cpu["watcher_processes_s"] += watchers.cpu_s
        finally:
            watchers.kill()
        await rt.settle(conv)
        lat, overtaken, miss = latencies_ms(model.stamps, seen)
        sends += sum(len(deltas) - 1 for deltas in seen)
        at_commit += overtaken
        samples.extend(lat)
        missing += miss
    return {
        "watchers": count,
        "answers": answers,
        "pieces_per_answer": model.chunks,
        "samples": len(samples),
        "missing": missing,
        "seen_at_commit": at_commit,
        "p50_ms": statistics.median(samples) if samples else None,
        "p99_ms": percentile(samples, 0.99) if samples else None,
        "max_ms": max(samples) if samples else None,
        # How many deltas a watcher read per answer (pieces that queued while it was busy
        # come merged as one).
        "deltas_per_watcher": round(sends / (count * answers), 1),
        # Where the CPU went while the answers streamed (the serving process is the turn's
        # own on SQLite, the peer on PostgreSQL).
        "cpu": {key: round(value / answers, 3) for key, value in cpu.items()},
    }


async def turn_overhead(rt: Runtime, model: StreamModel, turns: int) -> dict[str, Any]:
    """Serial turns whose answer comes as 200 pieces (streaming on) or as one (off), in
    alternating blocks on fresh conversations, so that drift in the machine hits both alike."""
    store = rt.store
    walls: dict[str, list[float]] = {"off": [], "on": []}
    units: dict[str, int] = {"off": 0, "on": 0}
    block = max(5, turns // 6)
    for label in ("off", "on") * 3:
        model.chunks, model.delay_s = (200 if label == "on" else 1), 0.0
        conv = (await rt.create_conversation(PRINCIPAL, Profile(model="bench"))).conversation_id
        units0 = int(getattr(store, "units_committed", 0))
        for i in range(block):
            t0 = time.perf_counter()
            await rt.post(conv, f"turn {i}", owner=PRINCIPAL)
            await rt.settle(conv)
            walls[label].append(time.perf_counter() - t0)
        units[label] += int(getattr(store, "units_committed", 0)) - units0
    model.chunks, model.delay_s = 200, 0.005
    return {label: {"turn_wall_p50_us": statistics.median(w) * 1e6,
                    "units_per_turn": units[label] / len(w)} for label, w in walls.items()}


async def one_backend(backend: str, args: argparse.Namespace, plan: Plan) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    async with scratch_url(backend, args.postgres_dsn, "stream") as url:
        model = StreamModel()
        model.chunks, model.delay_s = args.chunks, args.chunk_ms / 1000
        async with Runtime.open(url, models=[model]) as rt:
            app = create_app(rt, tokens={TOKEN: PRINCIPAL})
            server = Server(app, port=free_port(), log_level="warning",
                        freeze_heap=True)  # as `tidings serve` does
            serving = asyncio.create_task(server.serve())
            peer: subprocess.Popen[bytes] | None = None
            try:
                for _ in range(3000):
                    if server.started:
                        break
                    await asyncio.sleep(0.01)
                base = f"http://127.0.0.1:{server.port}"
                if backend == "postgres":
                    port = free_port()
                    peer = start(["--serve-peer", url, "--port", str(port)])
                    base = f"http://127.0.0.1:{port}"
                    await wait_http(base)
                figures["watch_base"] = "peer process" if peer is not None else "same process"
                with tempfile.TemporaryDirectory(prefix="tidings-bench-stream-") as folder:
                    for count in (1, args.watchers):
                        log(f"  {backend}: {count} watcher(s), {plan.answers} answers")
                        figures[f"watchers_{count}"] = await stream_answers(
                            rt, model, base, count, plan.answers, folder,
                            None if peer is None else peer.pid)
                log(f"  {backend}: turn overhead, streaming on and off")
                figures["overhead"] = await turn_overhead(rt, model, plan.overhead_turns)
            finally:
                if peer is not None:
                    peer.send_signal(signal.SIGTERM)
                    try:
                        peer.wait(15)
                    except subprocess.TimeoutExpired:
                        peer.kill()
                server.should_exit = True
                await serving
    return figures


async def main_async(args: argparse.Namespace) -> int:
    if args.watch:
        return await watch_main(args.watch, args.conversation, args.count, args.after, args.out,
                                args.ready)
    if args.serve_peer:
        return await serve_main(args.serve_peer, args.port)
    plan = QUICK if args.quick else FULL
    results = Results()
    started = time.monotonic()
    backends = ("sqlite", "postgres") if args.backend == "both" else (args.backend,)
    for backend in backends:
        prefix = "sqlite" if backend == "sqlite" else "pg"

        async def step(backend: str = backend) -> dict[str, Any]:
            return await one_backend(backend, args, plan)

        figure = await guarded(results, f"{prefix}_stream", step)
        if figure is not None:
            results.figures[f"{prefix}_stream"] = figure

    def get(prefix: str, count: int, key: str) -> Any:
        return results.figures.get(f"{prefix}_stream", {}).get(f"watchers_{count}", {}).get(key)

    def overhead(prefix: str, label: str) -> Any:
        return (results.figures.get(f"{prefix}_stream", {}).get("overhead", {})
                .get(label, {}).get("turn_wall_p50_us"))

    headline: dict[str, Any] = {}
    for prefix in ("sqlite", "pg"):
        headline[f"{prefix}_delta_p50_ms"] = get(prefix, 1, "p50_ms")
        headline[f"{prefix}_delta_p99_ms"] = get(prefix, 1, "p99_ms")
        headline[f"{prefix}_delta_p50_ms_{args.watchers}"] = get(prefix, args.watchers, "p50_ms")
        headline[f"{prefix}_delta_p99_ms_{args.watchers}"] = get(prefix, args.watchers, "p99_ms")
        headline[f"{prefix}_turn_overhead_streaming_on_us"] = overhead(prefix, "on")
        headline[f"{prefix}_turn_overhead_streaming_off_us"] = overhead(prefix, "off")
    raw_us = raw_sqlite_commit_us(1.0)
    print_table(results, args, raw_us)
    print(json.dumps({
        **headline,
        "raw_sqlite_commit_us": raw_us,
        "seconds": round(time.monotonic() - started, 1),
        "errors": results.errors,
        "figures": results.figures,
        "settings": {"plan": plan.name, "chunks": args.chunks, "chunk_ms": args.chunk_ms,
                     "watchers": args.watchers, "client_processes": CLIENT_PROCESSES,
                     "command": "python bench/stream.py" + (" --quick" if args.quick else ""),
                     "revision": source_revision()},
    }))
    return 1 if results.errors else 0


def print_table(results: Results, args: argparse.Namespace, raw_us: float) -> None:
    table = Table(title="streamed answers: model -> SSE watcher")
    table.add_column("figure")
    for prefix in ("SQLite", "PostgreSQL"):
        table.add_column(prefix, justify="right")
    table.add_column("goal", justify="right")

    def cell(prefix: str, *path: str) -> str:
        value: Any = results.figures.get(f"{prefix}_stream", {})
        for p in path:
            value = value.get(p, {}) if isinstance(value, dict) else None
        return fmt(value if not isinstance(value, dict) else None, 1)

    for count in (1, args.watchers):
        for key, goal in (("p50_ms", ""), ("p99_ms", "<= 100"), ("missing", "0")):
            table.add_row(f"{count} watcher(s): delta {key}",
                          cell("sqlite", f"watchers_{count}", key),
                          cell("pg", f"watchers_{count}", key), goal)
    for label in ("off", "on"):
        for key in ("turn_wall_p50_us", "units_per_turn"):
            table.add_row(f"streaming {label}: {key}", cell("sqlite", "overhead", label, key),
                          cell("pg", "overhead", label, key), "")
    table.add_row("raw SQLite commit p50 (µs)", fmt(raw_us, 0), "", "")
    Console().print(table)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="the small plan (under two minutes)")
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--postgres-dsn", default=DEFAULT_DSN)
    parser.add_argument("--chunks", type=int, default=200)
    parser.add_argument("--chunk-ms", type=float, default=5.0)
    parser.add_argument("--watchers", type=int, default=500)
    # Internal: the watcher and peer-server processes.
    parser.add_argument("--watch", help=argparse.SUPPRESS)
    parser.add_argument("--conversation", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--after", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--ready", help=argparse.SUPPRESS)
    parser.add_argument("--serve-peer", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main() -> int:
    return run_main(main_async, parse_args())


if __name__ == "__main__":
    sys.exit(main())
