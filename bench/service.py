"""The service bench: the same turns through a real ``tidings serve`` over HTTP and through the
library, in the same run.

    python bench/service.py [--quick] [--backend sqlite|postgres|both] [--postgres-dsn DSN]
                            [--concurrency 8]

Per backend, a ``tidings serve`` process of its own (the command line, on a free loopback port,
a scratch database, a bearer token, the scripted echo model, which answers at once) and, in this
process, a runtime opened with ``tidings.open`` on a second scratch database of the same kind,
with the same model and the same master key. A turn is a person's words and the answer to them:

* ``library``   -- ``await rt.post(conv, words, wait=True)``: the answer, once the run that read
                   the input ended;
* ``http_feed`` -- ``POST /v1/conversations/{id}/inputs`` (httpx, keep-alive), then the answer
                   read from the conversation's SSE feed, held open across turns: the input's
                   ``input_materialized`` names its run, the run's assistant
                   ``message_committed`` holds the reply, its ended ``turn_status`` ends the turn;
* ``http_wait`` -- ``POST .../inputs?wait=30``: the answer in the response;
* ``client``    -- ``await client.post(conv, words, wait=30)`` through ``tidings.Client``: the
                   same request, made and read by the Python client (its models, its errors);
* ``http_bare`` -- the feed way's turn (the same post, the same SSE feed, read the same way)
                   with a minimal HTTP/1.1 client on asyncio's streams instead of httpx: the
                   server's share of the feed way, with little of the measuring client's in it
                   (it shares this machine's CPUs with the server).

Serial turns, one conversation per way and block, the ways in alternating blocks (their order
rotated each block) so drift in the machine hits all three alike: wall time per turn, p50 and
p99, and the CPU each way spent per turn (this process; for HTTP also the server's, from
``/proc``). Then turns per second with ``--concurrency`` conversations at once, each posting
again as soon as it has its answer, in alternating windows. ``*_http_overhead_ratio`` is the
feed way's p50 over the library's (goal <= 1.5); ``*_client_overhead_ratio`` the client's p50
over the library's (goal <= 1.5; ``client_overhead_ratio`` is the worse of the backends');
``*_http_bare_overhead_ratio`` the bare way's p50 over the library's.

Progress goes to stderr; stdout gets a table and, last, one JSON line: the ratios, the p50s and
p99s, the turns per second, the raw SQLite (and PostgreSQL) commit p50 of the same run, the load
average, and every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from harness import (
    DEFAULT_DSN,
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
from loopback import free_port
from rich.console import Console
from rich.table import Table

import tidings
from tidings import Profile, ScriptedModel
from tidings.records.results import MasterKey

TOKEN, PRINCIPAL = "bench-token", "bench"
WAYS = ("library", "http_feed", "http_wait", "client", "http_bare")
GOAL_RATIO = 1.5
SLOW_US = 500_000  # a turn this slow waited for a slow poll, not for work
ENDED = frozenset({"completed", "failed", "needs_attention", "stopped"})


@dataclass(frozen=True)
class Plan:
    name: str
    blocks: int  # serial blocks per way
    block_turns: int  # timed turns per block
    warm_turns: int  # untimed turns at the start of each block (connections, caches)
    windows: int  # concurrent windows per way
    window_s: float
    window_warm_s: float
    raw_s: float


QUICK = Plan("quick", blocks=3, block_turns=100, warm_turns=5, windows=2, window_s=2.0,
             window_warm_s=0.5, raw_s=1.0)
FULL = Plan("full", blocks=6, block_turns=300, warm_turns=10, windows=3, window_s=6.0,
            window_warm_s=1.0, raw_s=2.0)


class Warnings(logging.Handler):
    """The warnings and errors this process's runtime logged (a turn ended by a lost slot, a
    store fault): a bench that only counted answers would not see them."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(f"{time.strftime('%H:%M:%S')} {record.name}: {record.getMessage()}")


def server_warnings(log_text: str) -> list[str]:
    """The server's log lines at WARNING or above (it is given tokens and a master key, so
    a clean start says none)."""
    return [line for line in log_text.splitlines()
            if any(level in line for level in ("WARNING", "ERROR", "CRITICAL"))]


# -- the server --------------------------------------------------------------------------------



class Served:
    """``tidings serve`` in a process of its own; its log goes to a file."""

    def __init__(self, database: str, folder: Path, master_key: str,
                 profile: str | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = folder / "serve.log"
        env = {**os.environ, "TIDINGS_TOKENS": f"{PRINCIPAL}={TOKEN}",
               "TIDINGS_MASTER_KEY": master_key}
        with self.log_path.open("wb") as sink:
            self.process = subprocess.Popen(
                [sys.executable, *(("-m", "cProfile", "-o", profile) if profile else ()),
                 "-m", "tidings", "serve", "--database", database,
                 "--host", "127.0.0.1", "--port", str(self.port), "--model", "scripted"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=sink, env=env)

    async def wait_ready(self, client: httpx.AsyncClient, within_s: float = 60.0) -> None:
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"tidings serve exited ({self.process.returncode}): "
                                   f"{self.log_tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get("/health", timeout=2)).status_code == 200:
                    return
            await asyncio.sleep(0.1)
        raise RuntimeError(f"tidings serve did not come up: {self.log_tail()}")

    def cpu_s(self) -> float:
        return process_cpu_s(self.process.pid)

    def stop(self) -> int | None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(30)
            return None

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def log_text(self) -> str:
        return self.log_path.read_text("utf-8", errors="replace")


# -- the ways of a turn ------------------------------------------------------------------------


class Bare:
    """One kept-alive HTTP/1.1 connection to the server on asyncio's streams: a request written
    in one piece, the answer's head parsed by hand, its body read by its length or its chunks.
    Only what the bare way needs (no redirects, no pooling, no timeouts of its own)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int) -> Bare:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)  # TCP_NODELAY: asyncio's
        return cls(reader, writer)

    async def request(self, method: str, path: str, body: bytes = b"",
                      accept: str = "application/json") -> tuple[int, dict[bytes, bytes]]:
        """Send a request; the answer's status and headers (names lowercased)."""
        head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Authorization: Bearer {TOKEN}\r\nAccept: {accept}\r\n")
        if body:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        self.writer.write(head.encode() + b"\r\n" + body)
        lines = (await self.reader.readuntil(b"\r\n\r\n")).split(b"\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name:
                headers[name.strip().lower()] = value.strip()
        return int(lines[0].split(b" ", 2)[1]), headers

    async def body(self, headers: dict[bytes, bytes]) -> bytes:
        if b"content-length" in headers:
            return await self.reader.readexactly(int(headers[b"content-length"]))
        return b"".join([chunk async for chunk in self.chunks()])

    async def chunks(self) -> AsyncIterator[bytes]:
        """A chunked body's chunks as they arrive, until its last."""
        while True:
            size = int((await self.reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
            if size == 0:
                await self.reader.readuntil(b"\r\n")
                return
            yield (await self.reader.readexactly(size + 2))[:-2]

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


class Feed:
    """One conversation's SSE feed, held open across turns, read as a client would: events
    split off the stream, and only the three kinds a turn's answer needs decoded."""

    WANTED = (b"input_materialized", b"message_committed", b"turn_status")

    def __init__(self, chunks: AsyncIterator[bytes]) -> None:
        self.chunks = chunks
        self.buffer = b""
        self.run_of: dict[str, str] = {}  # input id -> the run that read it
        self.reply_of: dict[str, str] = {}  # run id -> its last assistant text
        self.ended: set[str] = set()
        self.trace: list[tuple[int, str, int]] = []  # this turn's (read at, event, at_us)

    async def answer(self, input_id: str) -> str:
        """The reply to ``input_id``, once the run that read it has ended."""
        while True:
            run = self.run_of.get(input_id)
            if run is not None and run in self.ended:
                return self.reply_of.get(run, "")
            chunk = await self.chunks.__anext__()
            read_us = time.time_ns() // 1000
            self.buffer += chunk.replace(b"\r\n", b"\n")
            *events, self.buffer = self.buffer.split(b"\n\n")
            for event in events:
                self.take(event, read_us)

    def take(self, event: bytes, read_us: int) -> None:
        kind = b""
        data = b""
        for line in event.split(b"\n"):
            if line.startswith(b"event: "):
                kind = line[7:]
            elif line.startswith(b"data: "):
                data = line[6:]
        at = data.rfind(b'"at_us":')
        stamp = data[at + 8:].rstrip(b"}").split(b",", 1)[0] if at >= 0 else b""
        self.trace.append((read_us, kind.decode(), int(stamp) if stamp.isdigit() else 0))
        if kind not in self.WANTED:
            return
        decoded = json.loads(data)
        body = decoded["data"]
        if kind == b"input_materialized":
            self.run_of[body["input_id"]] = body["run_public_id"]
        elif kind == b"message_committed":
            message = body["message"]
            if message["role"] == "assistant" and not message.get("tool_calls"):
                self.reply_of[str(decoded["run_id"])] = message["content"]
        elif body.get("status") in ENDED:
            self.ended.add(body["run_public_id"])


@dataclass
class Ways:
    """What a turn is, each way; ``conversation`` makes a fresh one and returns its turn."""

    rt: tidings.Runtime
    client: httpx.AsyncClient
    tc: tidings.Client
    stack: contextlib.AsyncExitStack
    server: Served
    mismatches: list[str] = field(default_factory=list)
    slow_traces: list[list[tuple[float, str, float | None]]] = field(default_factory=list)

    async def conversation(self, way: str) -> Callable[[str], Awaitable[None]]:
        if way == "library":
            conv = (await self.rt.create_conversation(
                PRINCIPAL, Profile(model="scripted"))).conversation_id

            async def library(words: str) -> None:
                answer = await self.rt.post(conv, words, wait=True, timeout=30, owner=PRINCIPAL)
                self.check(words, answer.reply)

            return library
        if way == "client":
            made_by_client = await self.tc.create({"model": "scripted"})

            async def client(words: str) -> None:
                answer = await self.tc.post(made_by_client.conversation_id, words, wait=30)
                self.check(words, answer.reply)

            return client
        made = await self.client.post("/v1/conversations", json={"profile": {"model": "scripted"}})
        made.raise_for_status()
        conv = made.json()["conversation_id"]
        inputs = f"/v1/conversations/{conv}/inputs"
        if way == "http_bare":
            return await self.bare(conv, inputs)
        if way == "http_wait":

            async def http_wait(words: str) -> None:
                response = await self.client.post(inputs, params={"wait": 30},
                                                  json={"content": words})
                if response.status_code != 200:
                    raise RuntimeError(f"?wait= answered {response.status_code}: "
                                       f"{response.text[:200]}")
                self.check(words, response.json()["reply"])

            return http_wait
        response = await self.stack.enter_async_context(
            self.client.stream("GET", f"/v1/conversations/{conv}/events"))
        if response.status_code != 200:
            raise RuntimeError(f"the feed answered {response.status_code}")
        feed = Feed(response.aiter_raw())

        async def http_feed(words: str) -> None:
            t0 = time.time_ns() // 1000
            feed.trace = []
            posted = await self.client.post(inputs, json={"content": words})
            if posted.status_code != 202:
                raise RuntimeError(f"the post answered {posted.status_code}: {posted.text[:200]}")
            self.check(words, await feed.answer(posted.json()["input_id"]))
            if time.time_ns() // 1000 - t0 > SLOW_US and len(self.slow_traces) < 3:
                # What the feed gave and when, from the post: each event's arrival (ms) and
                # the time the server stamped it (ms; live events carry one too).
                self.slow_traces.append([(round((read - t0) / 1e3, 1), kind,
                                          round((at - t0) / 1e3, 1) if at else None)
                                         for read, kind, at in feed.trace])

        return http_feed

    async def bare(self, conv: str, inputs: str) -> Callable[[str], Awaitable[None]]:
        """The feed way's turn through :class:`Bare` connections: one for the posts, one for
        the feed."""
        poster = await Bare.open(self.server.port)
        self.stack.push_async_callback(poster.close)
        watcher = await Bare.open(self.server.port)
        self.stack.push_async_callback(watcher.close)
        status, _ = await watcher.request("GET", f"/v1/conversations/{conv}/events",
                                          accept="text/event-stream")
        if status != 200:
            raise RuntimeError(f"the feed answered {status}")
        feed = Feed(watcher.chunks())

        async def http_bare(words: str) -> None:
            status, headers = await poster.request(
                "POST", inputs, json.dumps({"content": words}).encode())
            body = await poster.body(headers)
            if status != 202:
                raise RuntimeError(f"the post answered {status}: {body[:200]!r}")
            self.check(words, await feed.answer(json.loads(body)["input_id"]))

        return http_bare

    def check(self, words: str, reply: str | None) -> None:
        """The echo model answers with the words: anything else is a wrong answer."""
        if reply != words and len(self.mismatches) < 10:
            self.mismatches.append(f"{words!r} -> {reply!r}")


async def serial(ways: Ways, plan: Plan) -> dict[str, Any]:
    """Serial turns, the ways in alternating blocks, a fresh conversation per way and block."""
    walls: dict[str, list[float]] = {w: [] for w in WAYS}
    own_cpu = dict.fromkeys(WAYS, 0.0)
    server_cpu = dict.fromkeys(WAYS, 0.0)
    busy = dict.fromkeys(WAYS, 0.0)
    span = dict.fromkeys(WAYS, 0.0)
    for block in range(plan.blocks):
        order = WAYS[block % len(WAYS):] + WAYS[:block % len(WAYS)]
        for way in order:
            turn = await ways.conversation(way)
            for n in range(plan.warm_turns):
                await turn(f"warm {block} {n}")
            own0, served0, (busy0, total0) = time.process_time(), ways.server.cpu_s(), \
                machine_cpu_s()
            for n in range(plan.block_turns):
                t0 = time.perf_counter()
                await turn(f"turn {block} {n}")
                walls[way].append(time.perf_counter() - t0)
            busy1, total1 = machine_cpu_s()
            own_cpu[way] += time.process_time() - own0
            server_cpu[way] += ways.server.cpu_s() - served0
            busy[way] += busy1 - busy0
            span[way] += total1 - total0
    out: dict[str, Any] = {}
    for way, samples in walls.items():
        n = len(samples)
        out[way] = {
            "turns": n,
            "p50_us": pct_us(samples, 0.5),
            "p99_us": pct_us(samples, 0.99),
            "mean_us": sum(samples) / n * 1e6,
            # A turn held ~1 s waits for something's slow poll (a lost wake-up), not for work.
            "turns_over_500ms": sum(1 for x in samples if x > SLOW_US / 1e6),
            "cpu_us_per_turn_this_process": own_cpu[way] / n * 1e6,
            "cpu_us_per_turn_server": server_cpu[way] / n * 1e6 if way != "library" else 0.0,
            "machine_busy": busy[way] / span[way] if span[way] else None,
        }
    return out


async def concurrent(ways: Ways, plan: Plan, conversations: int) -> dict[str, Any]:
    """Turns per second with ``conversations`` closed loops at once, in alternating windows."""
    windows: dict[str, list[float]] = {w: [] for w in WAYS}
    p50: dict[str, list[float]] = {w: [] for w in WAYS}
    shares: dict[str, dict[str, list[float]]] = {
        w: {"this_process": [], "server": [], "machine": []} for w in WAYS}
    for window in range(plan.windows):
        order = WAYS[window % len(WAYS):] + WAYS[:window % len(WAYS)]
        for way in order:
            turns = [await ways.conversation(way) for _ in range(conversations)]
            rate, latency, cpu = await closed_loops(turns, plan, ways.server)
            windows[way].append(rate)
            p50[way].append(latency)
            for key, value in cpu.items():
                shares[way][key].append(value)
    return {way: {"turns_per_s": sum(v) / len(v), "windows": v,
                  "latency_p50_us": sum(p50[way]) / len(p50[way]),
                  # Shares of one CPU over the windows: this process (the runtime for the
                  # library, the client for HTTP), the server, and the whole machine.
                  **{f"cpu_{key}": sum(x) / len(x) for key, x in shares[way].items()}}
            for way, v in windows.items()}


async def closed_loops(turns: list[Callable[[str], Awaitable[None]]], plan: Plan,
                       server: Served) -> tuple[float, float, dict[str, float]]:
    """Each conversation posts again as soon as it has its answer: turns per second ended in
    the window after a warm-up, their latency p50 (µs), and the CPU used meanwhile (shares of
    one CPU: this process, the server, the machine's busy CPUs)."""
    ends: list[float] = []
    latencies: list[float] = []
    stop = asyncio.Event()

    async def loop(turn: Callable[[str], Awaitable[None]], i: int) -> None:
        n = 0
        while not stop.is_set():
            t0 = time.perf_counter()
            await turn(f"c{i} {n}")
            t1 = time.perf_counter()
            ends.append(t1)
            latencies.append(t1 - t0)
            n += 1

    tasks = [asyncio.create_task(loop(t, i)) for i, t in enumerate(turns)]
    try:
        await asyncio.sleep(plan.window_warm_s)
        start, first = time.perf_counter(), len(ends)
        own0, served0, (busy0, _) = time.process_time(), server.cpu_s(), machine_cpu_s()
        await asyncio.sleep(plan.window_s)
        end = time.perf_counter()
        own1, served1, (busy1, _) = time.process_time(), server.cpu_s(), machine_cpu_s()
        done = sum(1 for t in ends[first:] if t <= end)
        measured = latencies[first:first + done]
    finally:
        stop.set()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    span = end - start
    return done / span, pct_us(measured, 0.5), {
        "this_process": (own1 - own0) / span, "server": (served1 - served0) / span,
        "machine": (busy1 - busy0) / span}


@contextlib.asynccontextmanager
async def opened(backend: str, dsn: str, profile: str | None) -> AsyncIterator[Ways]:
    master_key = secrets.token_hex(32)
    async with contextlib.AsyncExitStack() as stack:
        http_url = await stack.enter_async_context(scratch_url(backend, dsn, "service_http"))
        lib_url = await stack.enter_async_context(scratch_url(backend, dsn, "service_lib"))
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(
            prefix="tidings-bench-service-")))
        server = Served(http_url, folder, master_key, profile)
        stack.callback(server.stop)
        client = await stack.enter_async_context(httpx.AsyncClient(
            base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=httpx.Timeout(60.0, connect=10.0),
            limits=httpx.Limits(max_connections=256, max_keepalive_connections=256)))
        await server.wait_ready(client)
        tc = await stack.enter_async_context(tidings.Client(server.url, TOKEN, timeout_s=60.0))
        rt = await stack.enter_async_context(tidings.open(
            lib_url, models=[ScriptedModel()], master_key=MasterKey.parse(master_key)))
        feeds = await stack.enter_async_context(contextlib.AsyncExitStack())
        yield Ways(rt=rt, client=client, tc=tc, stack=feeds, server=server)


async def one_backend(backend: str, args: argparse.Namespace, plan: Plan) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    caught = Warnings()
    logging.getLogger("tidings").addHandler(caught)
    try:
        profile = f"{args.profile_server}.{backend}" if args.profile_server else None
        async with opened(backend, args.postgres_dsn, profile) as ways:
            figures.update(await measure(ways, backend, args, plan))
    finally:
        logging.getLogger("tidings").removeHandler(caught)
    figures["library_warnings"] = caught.records[:20]
    figures["library_warnings_count"] = len(caught.records)
    s, c = figures["serial"], figures["concurrent"]
    lib = s["library"]["p50_us"]
    figures["http_overhead_ratio"] = s["http_feed"]["p50_us"] / lib
    figures["http_wait_overhead_ratio"] = s["http_wait"]["p50_us"] / lib
    figures["client_overhead_ratio"] = s["client"]["p50_us"] / lib
    figures["http_bare_overhead_ratio"] = s["http_bare"]["p50_us"] / lib
    figures["concurrent_http_vs_library"] = (c["http_feed"]["turns_per_s"]
                                             / c["library"]["turns_per_s"])
    if figures["wrong_answers"]:
        raise RuntimeError(f"wrong answers: {figures['wrong_answers']}")
    return figures


async def measure(ways: Ways, backend: str, args: argparse.Namespace,
                  plan: Plan) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    log(f"  {backend}: serial turns, {plan.blocks} blocks of {plan.block_turns} per way")
    figures["serial"] = await serial(ways, plan)
    await ways.stack.aclose()  # the feeds of the serial blocks
    log(f"  {backend}: {args.concurrency} conversations at once, {plan.windows} windows "
        f"of {plan.window_s:.0f} s per way")
    figures["concurrent"] = await concurrent(ways, plan, args.concurrency)
    await ways.stack.aclose()
    figures["wrong_answers"] = ways.mismatches
    figures["server_warnings"] = server_warnings(ways.server.log_text())[:20]
    figures["slow_feed_turns"] = ways.slow_traces
    return figures


async def main_async(args: argparse.Namespace) -> int:
    plan = QUICK if args.quick else FULL
    results = Results()
    started = time.monotonic()
    load_before = os.getloadavg()
    backends = ("sqlite", "postgres") if args.backend == "both" else (args.backend,)
    raw: dict[str, list[float]] = {"sqlite": [], "postgres": []}

    def measure_raw() -> None:
        raw["sqlite"].append(raw_sqlite_commit_us(plan.raw_s))
        if "postgres" in backends:
            raw["postgres"].append(raw_pg_commit_us(args.postgres_dsn, plan.raw_s))

    measure_raw()
    for backend in backends:
        prefix = "sqlite" if backend == "sqlite" else "pg"

        async def step(backend: str = backend) -> dict[str, Any]:
            return await one_backend(backend, args, plan)

        figure = await guarded(results, f"{prefix}_service", step)
        if figure is not None:
            results.figures[prefix] = figure
    measure_raw()
    raw_us = {k: sum(v) / len(v) for k, v in raw.items() if v}

    headline: dict[str, Any] = {}
    for prefix in ("sqlite", "pg"):
        f = results.figures.get(prefix)
        if f is None:
            continue
        s, c = f["serial"], f["concurrent"]
        headline[f"{prefix}_http_overhead_ratio"] = f["http_overhead_ratio"]
        headline[f"{prefix}_http_wait_overhead_ratio"] = f["http_wait_overhead_ratio"]
        headline[f"{prefix}_client_overhead_ratio"] = f["client_overhead_ratio"]
        headline[f"{prefix}_http_bare_overhead_ratio"] = f["http_bare_overhead_ratio"]
        for way in WAYS:
            headline[f"{prefix}_{way}_turn_p50_us"] = s[way]["p50_us"]
            headline[f"{prefix}_{way}_turn_p99_us"] = s[way]["p99_us"]
            headline[f"{prefix}_{way}_turns_per_s_{args.concurrency}"] = c[way]["turns_per_s"]
    print_table(results, args, raw_us)
    client_ratios = [f["client_overhead_ratio"] for f in results.figures.values()]
    print(json.dumps({
        "client_overhead_ratio": max(client_ratios) if client_ratios else None,
        **headline,
        "raw_sqlite_commit_us": raw_us.get("sqlite"),
        "raw_pg_commit_us": raw_us.get("postgres"),
        "raw_commit_us_before_after": raw,
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "seconds": round(time.monotonic() - started, 1),
        "errors": results.errors,
        "figures": results.figures,
        "settings": {"plan": plan.__dict__, "concurrency": args.concurrency,
                     "model": "scripted (echo)", "nproc": os.cpu_count(),
                     "command": "python bench/service.py" + (" --quick" if args.quick else ""),
                     "revision": source_revision()},
    }))
    return 1 if results.errors else 0


def print_table(results: Results, args: argparse.Namespace, raw_us: dict[str, float]) -> None:
    table = Table(title="the same turns: tidings serve over HTTP vs the library")
    table.add_column("figure")
    for title in ("SQLite", "PostgreSQL"):
        table.add_column(title, justify="right")
    table.add_column("goal", justify="right")

    def cell(prefix: str, *path: str, digits: int = 0) -> str:
        value: Any = results.figures.get(prefix, {})
        for p in path:
            value = value.get(p) if isinstance(value, dict) else None
        return fmt(value if not isinstance(value, dict) else None, digits)

    for way in WAYS:
        for key in ("p50_us", "p99_us"):
            table.add_row(f"serial {way}: {key}", cell("sqlite", "serial", way, key),
                          cell("pg", "serial", way, key), "")
        table.add_row(f"serial {way}: CPU µs per turn (this process + server)",
                      *(fmt(sum(results.figures.get(p, {}).get("serial", {}).get(way, {}).get(k, 0)
                                for k in ("cpu_us_per_turn_this_process",
                                          "cpu_us_per_turn_server")) or None)
                        for p in ("sqlite", "pg")), "")
    table.add_row("serial turns over 500 ms (library / feed / ?wait= / client / bare)",
                  *("/".join(cell(p, "serial", way, "turns_over_500ms") for way in WAYS)
                    for p in ("sqlite", "pg")), "")
    table.add_row("http_overhead_ratio (feed p50 / library p50)",
                  cell("sqlite", "http_overhead_ratio", digits=2),
                  cell("pg", "http_overhead_ratio", digits=2), f"≤ {GOAL_RATIO}")
    table.add_row("?wait= p50 / library p50", cell("sqlite", "http_wait_overhead_ratio", digits=2),
                  cell("pg", "http_wait_overhead_ratio", digits=2), "")
    table.add_row("client_overhead_ratio (tidings.Client p50 / library p50)",
                  cell("sqlite", "client_overhead_ratio", digits=2),
                  cell("pg", "client_overhead_ratio", digits=2), f"≤ {GOAL_RATIO}")
    table.add_row("the feed way with a bare client: p50 / library p50",
                  cell("sqlite", "http_bare_overhead_ratio", digits=2),
                  cell("pg", "http_bare_overhead_ratio", digits=2), "")
    for way in WAYS:
        table.add_row(f"{args.concurrency} conversations, {way}: turns/s",
                      cell("sqlite", "concurrent", way, "turns_per_s", digits=1),
                      cell("pg", "concurrent", way, "turns_per_s", digits=1), "")
    for way in WAYS:
        table.add_row(f"{args.concurrency} conversations, {way}: CPUs used (this process / "
                      "server)", *(
                          f"{cell(p, 'concurrent', way, 'cpu_this_process', digits=2)} / "
                          f"{cell(p, 'concurrent', way, 'cpu_server', digits=2)}"
                          for p in ("sqlite", "pg")), "")
    table.add_row("raw commit p50 µs (mean of before and after)", fmt(raw_us.get("sqlite")),
                  fmt(raw_us.get("postgres")), "")
    Console().print(table)
    for name, message in results.errors.items():
        Console(stderr=True).print(f"[red]{name}[/red]: {message}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="the small plan (under two minutes)")
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--postgres-dsn", default=DEFAULT_DSN,
                        help="an admin DSN; scratch databases are made and dropped on it")
    parser.add_argument("--concurrency", type=int, default=8,
                        help="conversations at once for the turns-per-second figure")
    parser.add_argument("--profile-server", metavar="PATH",
                        help="run the server under cProfile (its event loop's thread), the "
                             "stats written to PATH.<backend> when it stops")
    return parser.parse_args(argv)


def main() -> int:
    return run_main(main_async, parse_args())


if __name__ == "__main__":
    sys.exit(main())
