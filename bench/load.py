"""The load benchmark: a real ``tidings serve`` under many writers and watchers at once.

    python bench/load.py [--quick] [--backend sqlite|postgres|both] [--postgres-dsn DSN]
                         [--seconds S] [--watchers N] [--posters N]

On each backend, a ``tidings serve`` process of its own (SQLite: a file in a temp folder;
PostgreSQL: a database created on ``--postgres-dsn`` and dropped afterwards), listening on
127.0.0.1 only, with bearer tokens for five principals, an operator token, a master key and the
scripted model (it echoes). This process drives it over HTTP (httpx, async) for a bounded time:

* 50 posters (``--posters``), each a principal's client owning two conversations it created,
  post inputs in a closed loop (the next post as soon as the last was acknowledged), round robin
  over their conversations, each with an idempotency key of its own. A refusal (429) waits its
  ``Retry-After``; a transport error retries the same key. The model answers every input.
* 200 watchers (``--watchers``), spread evenly over the conversations (two per conversation),
  read the event feed (``GET /v1/conversations/{id}/events``, Server-Sent Events, parsed here
  line by line). Each watcher leaves and comes back every 5-15 s, resuming with
  ``Last-Event-ID``, so feeds open and close all along, as browser tabs do.

Phases: start the server and take its resident memory (``ready``); create the conversations and
connect every watcher; load for a warm-up (not measured), then for the measured window; stop
posting; wait until every input was read and every run ended; read each conversation's inputs
and journal; wait until every watcher has received the whole journal; stop the server with
SIGTERM while the watchers are still connected.

Figures, per backend:

* ``5xx``: responses with a status of 500 or more, over every request this process made
  (creates, posts, feed connects, the reads after). Goal 0.
* ``lost_inputs``: inputs acknowledged (202) whose id is not among the conversation's inputs
  afterwards (``GET .../inputs``), plus any the journal lacks (its ``input_accepted`` events,
  ``GET .../events.json``). Goal 0. Also ``unacknowledged_in_db``: person inputs on file that
  no post saw acknowledged (a post whose answer was lost; each retry reuses its key).
* post latency: the time of one ``POST .../inputs`` as the client saw it, p50 / p99 in ms,
  over the posts sent in the measured window; posts per second over that window.
* event lag: for every event a watcher received in the measured window, the watcher's wall clock
  when the event's last line arrived minus the event's ``at_us`` (the server's wall clock, stamped
  in the unit of work that journals it, just before its commit): commit, the feed's poll
  interval (100 ms), serialisation and the loopback. p50 / p99 in ms. Same machine, same clock.
  Also ``ack_lag``: for each person input, a watcher receiving its ``input_accepted`` minus the
  poster receiving its 202 (negative when the feed was faster than the answer).
* feed exactly-once: each watcher's sequence ids must run 1, 2, 3, ... across its reconnects
  (gaps and repeats counted) and end at the journal's last event (``watchers_behind``).
* memory: the server's ``VmRSS`` (``/proc/<pid>/status``) when ready, at the start of the
  measured window (after the warm-up, every watcher connected) and at its end; the growth is
  end minus start (goal at most 20 MiB in the quick plan). Sampled every second; the peak too.
* shutdown: SIGTERM with every watcher connected; the exit status, how long it took, and
  feeds that broke instead of ending (the client read an incomplete response). Goal 0.
* the server's CPU seconds and open file descriptors, the machine's busy share and this
  process's CPU (a client that saturates its core inflates the lag); also the server's CPU
  with every watcher connected and nothing posted (``idle_feeds_cpu_share``: the feeds poll).

raw: one single-row SQLite commit (WAL, synchronous=FULL) on a plain connection, p50 in us,
measured before and after in the same run, printed beside the figures: on a shared machine it
says how busy the disk and CPUs were.

Progress goes to stderr; stdout gets a table and, last, one JSON line (``sqlite_5xx``,
``pg_5xx``, ``sqlite_lost_inputs``, ``pg_lost_inputs``, ``*_post_p50_ms``, ``*_post_p99_ms``,
``*_lag_p50_ms``, ``*_lag_p99_ms``, ``*_rss_growth_mib``, ``raw_sqlite_commit_us``, every figure
under ``figures``). Exit status 1 if a measurement failed, a 5xx was seen, an input was lost,
a feed missed or repeated an event, or the shutdown broke a feed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import resource
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from harness import (
    DEFAULT_DSN,
    Results,
    err,
    fmt,
    guarded,
    log,
    machine_cpu_s,
    now_us,
    raw_sqlite_commit_us,
    run_main,
    scratch_url,
    source_revision,
    terminate,
)
from loopback import free_port
from rich.console import Console
from rich.table import Table

out = Console(highlight=False, width=150)

PRINCIPALS = 5
CONVERSATIONS_PER_POSTER = 2
RECONNECT_S = (5.0, 15.0)  # a watcher leaves and resumes after a random time in this range
SETTLE_S = 90.0  # bound on waiting for the last turns and the last events (never reached)
RSS_GOAL_MIB = 20.0
MIB = 1024 * 1024


@dataclass(frozen=True)
class Plan:
    name: str
    warmup_s: float
    seconds: float
    raw_seconds: float
    idle_s: float


QUICK = Plan("quick", warmup_s=5.0, seconds=15.0, raw_seconds=1.0, idle_s=2.0)
FULL = Plan("full", warmup_s=15.0, seconds=120.0, raw_seconds=3.0, idle_s=5.0)


# -- the server process ------------------------------------------------------------------------



@dataclass
class Sample:
    t: float
    rss_kib: int
    cpu_s: float
    fds: int
    threads: int


class Served:
    """``tidings serve`` in a process of its own; its log goes to a file."""

    def __init__(self, database: str, folder: Path, tokens: dict[str, str],
                 operator_token: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = folder / "serve.log"
        env = {**os.environ,
               "TIDINGS_TOKENS": ",".join(f"{p}={t}" for p, t in tokens.items()),
               "TIDINGS_OPERATOR_TOKENS": operator_token,
               "TIDINGS_MASTER_KEY": secrets.token_hex(32)}
        with self.log_path.open("wb") as sink:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tidings", "serve", "--database", database,
                 "--host", "127.0.0.1", "--port", str(self.port), "--model", "scripted",
                 "--json-logs"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=sink, env=env)
        self.pid = self.process.pid
        self.stopped_at = float("inf")  # wall clock of the SIGTERM

    async def wait_ready(self, client: httpx.AsyncClient, within_s: float = 60.0) -> None:
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"tidings serve exited ({self.process.returncode}): "
                                   f"{self.log_tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(f"{self.url}/health", timeout=2)).status_code == 200:
                    return
            await asyncio.sleep(0.1)
        raise RuntimeError(f"tidings serve did not come up: {self.log_tail()}")

    def sample(self) -> Sample:
        status = Path(f"/proc/{self.pid}/status").read_text()
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        stat = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        return Sample(t=time.monotonic(), rss_kib=int(fields["VmRSS"].split()[0]),
                      cpu_s=(int(stat[11]) + int(stat[12])) / tick,
                      fds=len(os.listdir(f"/proc/{self.pid}/fd")),
                      threads=int(fields["Threads"]))

    def stop(self, within_s: float = 30.0) -> tuple[int | None, float]:
        """SIGTERM, then the exit status and how long the graceful shutdown took."""
        t0 = time.perf_counter()
        self.stopped_at = time.time()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code: int | None = self.process.wait(within_s)
        except subprocess.TimeoutExpired:
            code = None
        return code, time.perf_counter() - t0

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)

    def log_records(self) -> list[dict[str, Any]]:
        records = []
        for line in self.log_path.read_text("utf-8", errors="replace").splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                records.append({"level": "RAW", "message": line})
        return records

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log_path.read_text("utf-8", errors="replace").splitlines()[-lines:])


@contextlib.asynccontextmanager
async def served(database: str, tokens: dict[str, str], operator_token: str,
                 client: httpx.AsyncClient) -> AsyncIterator[Served]:
    with tempfile.TemporaryDirectory(prefix="tidings-bench-load-log-") as folder:
        server = Served(database, Path(folder), tokens, operator_token)
        try:
            await server.wait_ready(client)
            yield server
        finally:
            server.kill()  # a no-op once it was stopped; kills it on Ctrl-C or a failure


# -- the load ----------------------------------------------------------------------------------


@dataclass
class Load:
    """What the clients saw, shared by every poster and watcher of one backend."""

    statuses: Counter[int] = field(default_factory=Counter)
    fivexx: list[str] = field(default_factory=list)  # method, path and body of the first few
    measure_from: float = float("inf")  # monotonic; set when the measured window opens
    measure_until: float = float("inf")
    posting: bool = True
    watching: bool = True
    # posts
    post_ms: list[float] = field(default_factory=list)  # in the measured window
    posted_in_window: int = 0
    acked: dict[str, tuple[str, float]] = field(default_factory=dict)  # input -> (conv, wall)
    refused: Counter[str] = field(default_factory=Counter)  # 4xx codes
    transport_errors: Counter[str] = field(default_factory=Counter)  # "post ReadError": n
    posts_abandoned: int = 0
    # feeds
    lag_ms: list[float] = field(default_factory=list)
    accepted_seen: list[tuple[str, float]] = field(default_factory=list)  # (input, wall)

    def saw(self, response: httpx.Response, what: str) -> None:
        self.statuses[response.status_code] += 1
        if response.status_code >= 500 and len(self.fivexx) < 10:
            try:
                body = response.text[:300]
            except httpx.ResponseNotRead:
                body = ""
            self.fivexx.append(f"{what} -> {response.status_code} {body}")

    def in_window(self, t: float) -> bool:
        return self.measure_from <= t < self.measure_until


@dataclass
class Watcher:
    conversation_id: str
    token: str
    last: int = 0
    received: int = 0
    gaps: int = 0
    repeats: int = 0
    live: int = 0
    """Live events (an answer being written: no SSE id), not journal rows."""
    connects: int = 0
    refused: int = 0
    connected: asyncio.Event = field(default_factory=asyncio.Event)

    def on_event(self, load: Load, seq: int, data: str) -> None:
        arrived, wall = time.monotonic(), time.time()
        if not seq and json.loads(data).get("seq") is None:
            self.live += 1
            return
        if seq <= self.last:
            self.repeats += 1
            return
        self.gaps += seq - self.last - 1
        self.last = seq
        self.received += 1
        event = json.loads(data)
        if load.in_window(arrived):
            load.lag_ms.append((now_us() - int(event["at_us"])) / 1000)
        if event["type"] == "input_accepted" and event["data"].get("origin") == "person":
            load.accepted_seen.append((str(event["data"]["input_id"]), wall))


async def watch(watcher: Watcher, client: httpx.AsyncClient, load: Load,
                rng: random.Random) -> None:
    """Read the feed until told to stop; leave and resume with ``Last-Event-ID`` now and then."""
    path = f"/v1/conversations/{watcher.conversation_id}/events"
    while load.watching:
        headers = {"Authorization": f"Bearer {watcher.token}"}
        if watcher.last:
            headers["Last-Event-ID"] = str(watcher.last)
        leave_at = time.monotonic() + rng.uniform(*RECONNECT_S)
        try:
            async with client.stream("GET", path, headers=headers) as response:
                if response.status_code != 200:
                    await response.aread()
                    load.saw(response, f"GET {path}")
                    watcher.refused += 1
                    await asyncio.sleep(0.5)
                    continue
                load.saw(response, f"GET {path}")
                watcher.connects += 1
                watcher.connected.set()
                seq, data = 0, ""
                async for line in response.aiter_lines():
                    if not line:  # an event ends at a blank line
                        if data:
                            watcher.on_event(load, seq, data)
                        seq, data = 0, ""
                        if time.monotonic() >= leave_at and load.posting:
                            break  # leave; the next connect resumes after the last id
                    elif line.startswith("id:"):
                        seq = int(line[3:].strip())
                    elif line.startswith("data:"):
                        data += line[5:].removeprefix(" ")
                    # "event:" is in the data too; ":" lines are keep-alive comments
        except httpx.TransportError as exc:
            when = "" if load.watching else " on shutdown"
            load.transport_errors[f"feed {type(exc).__name__}{when}"] += 1
            await asyncio.sleep(0.2)


async def post_loop(index: int, conversations: list[str], token: str,
                    client: httpx.AsyncClient, load: Load) -> None:
    """Closed loop: post, wait for the answer, post the next, until posting stops."""
    headers = {"Authorization": f"Bearer {token}"}
    n = 0
    while load.posting:
        conversation = conversations[n % len(conversations)]
        n += 1
        path = f"/v1/conversations/{conversation}/inputs"
        body = {"content": f"poster {index} says {n}", "idempotency_key": f"p{index}-{n}"}
        for _attempt in range(5):
            t0 = time.monotonic()
            try:
                response = await client.post(path, json=body, headers=headers)
            except httpx.TransportError as exc:
                load.transport_errors[f"post {type(exc).__name__}"] += 1
                await asyncio.sleep(0.2)
                continue  # the same key: a post that did commit is answered, not repeated
            elapsed = time.monotonic() - t0
            load.saw(response, f"POST {path}")
            if response.status_code == 202:
                load.acked[str(response.json()["input_id"])] = (conversation, time.time())
                if load.in_window(t0):
                    load.post_ms.append(elapsed * 1000)
                    load.posted_in_window += 1
                break
            if response.status_code >= 500:
                break
            load.refused[_code(response)] += 1
            if response.status_code != 429:
                break
            await asyncio.sleep(min(2.0, float(response.headers.get("Retry-After", "0.2"))))
        else:
            load.posts_abandoned += 1


def _code(response: httpx.Response) -> str:
    try:
        return f"{response.status_code} {response.json().get('code')}"
    except ValueError:
        return str(response.status_code)


# -- one backend -------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def get_json(client: httpx.AsyncClient, load: Load, path: str, token: str,
                   **params: Any) -> Any:
    response = await client.get(path, params=params, headers={"Authorization": f"Bearer {token}"})
    load.saw(response, f"GET {path}")
    response.raise_for_status()
    return response.json()


async def journal(client: httpx.AsyncClient, load: Load, conversation: str,
                  token: str) -> list[dict[str, Any]]:
    """Every event of the conversation, page by page."""
    events: list[dict[str, Any]] = []
    after = 0
    while True:
        page = await get_json(client, load, f"/v1/conversations/{conversation}/events.json",
                              token, after=after)
        events += page["items"]
        if not page["items"]:
            return events
        after = page["next_after"]


async def settled(client: httpx.AsyncClient, load: Load, conversation: str,
                  token: str) -> list[dict[str, Any]] | None:
    """The conversation's inputs once none is queued and no run is queued or running."""
    inputs = (await get_json(client, load, f"/v1/conversations/{conversation}/inputs",
                             token))["items"]
    if any(i["state"] == "queued" for i in inputs):
        return None
    runs = (await get_json(client, load, f"/v1/conversations/{conversation}/runs",
                           token))["items"]
    if any(r["status"] in ("queued", "running") for r in runs):
        return None
    return list(inputs)


async def run_backend(backend: str, dsn: str, plan: Plan, posters: int, watchers: int,
                      seconds: float) -> dict[str, Any]:
    tokens = {f"principal-{i}": f"tok-{i}-{secrets.token_hex(8)}" for i in range(PRINCIPALS)}
    token_list = list(tokens.values())
    operator = f"op-{secrets.token_hex(8)}"
    load = Load()
    # A pooled connection is dropped before uvicorn's 5 s keep-alive timeout closes it, so a
    # post never races the server's close of an idle connection (a client-side ReadError).
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=posters + 16,
                          keepalive_expiry=2.0)
    timeout = httpx.Timeout(30.0, connect=10.0)
    feed_timeout = httpx.Timeout(60.0, connect=10.0)  # the server pings every 15 s
    figures: dict[str, Any] = {}
    async with contextlib.AsyncExitStack() as stack:
        url = await stack.enter_async_context(scratch_url(backend, dsn, "load"))
        plain = await stack.enter_async_context(httpx.AsyncClient(timeout=timeout))
        server = await stack.enter_async_context(served(url, tokens, operator, plain))
        base = server.url
        posts = await stack.enter_async_context(
            httpx.AsyncClient(base_url=base, timeout=timeout, limits=limits))
        feeds = await stack.enter_async_context(
            httpx.AsyncClient(base_url=base, timeout=feed_timeout,
                              limits=httpx.Limits(max_connections=None,
                                                  max_keepalive_connections=0)))
        ready = server.sample()
        log(f"  server pid {server.pid} ready on {base}: RSS {ready.rss_kib / 1024:.1f} MiB")

        # Conversations: each poster opens its own, as its principal.
        owners: dict[str, str] = {}
        by_poster: list[list[str]] = []
        for p in range(posters):
            token = token_list[p % PRINCIPALS]
            mine = []
            for _ in range(CONVERSATIONS_PER_POSTER):
                response = await posts.post(
                    "/v1/conversations", json={"profile": {"model": "scripted"}},
                    headers={"Authorization": f"Bearer {token}"})
                load.saw(response, "POST /v1/conversations")
                response.raise_for_status()
                conversation = str(response.json()["conversation_id"])
                owners[conversation] = token
                mine.append(conversation)
            by_poster.append(mine)
        conversations = list(owners)

        rng = random.Random(7)
        feeders = [Watcher(conversations[w % len(conversations)],
                           owners[conversations[w % len(conversations)]])
                   for w in range(watchers)]
        watch_tasks = [asyncio.create_task(watch(w, feeds, load, rng)) for w in feeders]
        async with asyncio.timeout(60):
            await asyncio.gather(*(w.connected.wait() for w in feeders))
        connected = server.sample()
        log(f"  {len(conversations)} conversations, {watchers} watchers connected: RSS "
            f"{connected.rss_kib / 1024:.1f} MiB, {connected.fds} fds")

        samples: list[Sample] = [ready, connected]

        async def sampler() -> None:
            while True:
                await asyncio.sleep(1.0)
                samples.append(server.sample())

        sampling = asyncio.create_task(sampler())
        # What the open feeds cost with nothing happening: each polls its journal.
        idle0 = server.sample()
        await asyncio.sleep(plan.idle_s)
        idle1 = server.sample()
        post_tasks = [asyncio.create_task(post_loop(p, by_poster[p], token_list[p % PRINCIPALS],
                                                    posts, load))
                      for p in range(posters)]
        await asyncio.sleep(plan.warmup_s)
        start = server.sample()
        machine0, client0 = machine_cpu_s(), time.process_time()
        load.measure_from = time.monotonic()
        await asyncio.sleep(seconds)
        load.measure_until = time.monotonic()
        end = server.sample()
        machine1, client1 = machine_cpu_s(), time.process_time()
        window = load.measure_until - load.measure_from
        load.posting = False
        await asyncio.gather(*post_tasks)
        log(f"  load over: {load.posted_in_window} posts in the {window:.0f} s window; RSS "
            f"{start.rss_kib / 1024:.1f} -> {end.rss_kib / 1024:.1f} MiB; settling")

        # Every input read and every run over, then the journals and the inputs on file.
        t_settle = time.monotonic()
        gate = asyncio.Semaphore(16)
        inputs: dict[str, list[dict[str, Any]]] = {}

        async def settle(conversation: str) -> None:
            async with gate:
                found = await settled(posts, load, conversation, owners[conversation])
            if found is not None:
                inputs[conversation] = found

        async def read_journal(conversation: str) -> tuple[str, list[dict[str, Any]]]:
            async with gate:
                return conversation, await journal(posts, load, conversation,
                                                   owners[conversation])

        while time.monotonic() - t_settle < SETTLE_S:
            await asyncio.gather(*(settle(c) for c in conversations if c not in inputs))
            if len(inputs) == len(conversations):
                break
            await asyncio.sleep(0.2)
        drain_s = time.monotonic() - t_settle
        pending = [c for c in conversations if c not in inputs]
        journals = dict(await asyncio.gather(*(read_journal(c) for c in conversations)))
        heads = {c: (j[-1]["seq"] if j else 0) for c, j in journals.items()}
        while time.monotonic() - t_settle < SETTLE_S:
            if all(w.last >= heads[w.conversation_id] for w in feeders):
                break
            await asyncio.sleep(0.1)
        settle_s = time.monotonic() - t_settle

        # Stop the server with every watcher still connected: their feeds must end at once.
        load.watching = False
        settled_sample = server.sample()
        sampling.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampling
        exit_code, shutdown_s = await asyncio.to_thread(server.stop)
        try:
            async with asyncio.timeout(10):
                await asyncio.gather(*watch_tasks)
            feeds_ended = True
        except TimeoutError:
            feeds_ended = False
            for task in watch_tasks:
                task.cancel()
            await asyncio.gather(*watch_tasks, return_exceptions=True)
        records = server.log_records()
        stopped_at = server.stopped_at

    on_file = {i["input_id"] for items in inputs.values() for i in items
               if i["origin"] == "person"}
    truncated = [c for c, items in inputs.items() if len(items) >= 1000]
    in_journal = {e["data"]["input_id"] for j in journals.values() for e in j
                  if e["type"] == "input_accepted" and e["data"].get("origin") == "person"}
    acked = set(load.acked)
    ack_by_id = {i: t for i, (_, t) in load.acked.items()}
    ack_lag = [(t - ack_by_id[i]) * 1000 for i, t in load.accepted_seen if i in ack_by_id]
    levels = Counter(str(r.get("level", "?")) for r in records)
    problems = [r for r in records if r.get("level") in ("WARNING", "ERROR", "CRITICAL", "RAW")]

    def after_stop(record: dict[str, Any]) -> bool:
        with contextlib.suppress(KeyError, TypeError, ValueError):
            return datetime.fromisoformat(str(record["ts"])).timestamp() >= stopped_at
        return False
    rss_peak = max(s.rss_kib for s in samples)
    figures.update({
        "fivexx": sum(n for s, n in load.statuses.items() if s >= 500),
        "fivexx_examples": load.fivexx,
        "statuses": {str(s): n for s, n in sorted(load.statuses.items())},
        "inputs_acknowledged": len(acked),
        "inputs_on_file": len(on_file),
        "inputs_in_journal": len(in_journal),
        "lost_inputs": len(acked - (on_file & in_journal)),
        "unacknowledged_in_db": len(on_file - acked),
        "inputs_lists_truncated": len(truncated),
        "conversations_not_settled": len(pending),
        "refused": dict(load.refused),
        "transport_errors": dict(load.transport_errors),
        "posts_abandoned": load.posts_abandoned,
        "posts_in_window": load.posted_in_window,
        "posts_per_s": load.posted_in_window / window,
        "post_p50_ms": percentile(load.post_ms, 0.50),
        "post_p99_ms": percentile(load.post_ms, 0.99),
        "post_max_ms": max(load.post_ms, default=None),
        "events_in_window": len(load.lag_ms),
        "events_per_s": len(load.lag_ms) / window,
        "lag_p50_ms": percentile(load.lag_ms, 0.50),
        "lag_p99_ms": percentile(load.lag_ms, 0.99),
        "lag_max_ms": max(load.lag_ms, default=None),
        "ack_lag_p50_ms": percentile(ack_lag, 0.50),
        "ack_lag_p99_ms": percentile(ack_lag, 0.99),
        "watcher_gaps": sum(w.gaps for w in feeders),
        "watcher_repeats": sum(w.repeats for w in feeders),
        "live_events_received": sum(w.live for w in feeders),
        "watchers_behind": sum(w.last < heads[w.conversation_id] for w in feeders),
        "watcher_connects": sum(w.connects for w in feeders),
        "watcher_refused": sum(w.refused for w in feeders),
        "events_received": sum(w.received for w in feeders),
        "journal_events": sum(heads.values()),
        "rss_ready_mib": ready.rss_kib / 1024,
        "rss_connected_mib": connected.rss_kib / 1024,
        "rss_start_mib": start.rss_kib / 1024,
        "rss_end_mib": end.rss_kib / 1024,
        "rss_settled_mib": settled_sample.rss_kib / 1024,
        "rss_peak_mib": rss_peak / 1024,
        "rss_growth_mib": (end.rss_kib - start.rss_kib) / 1024,
        "rss_series_mib": [round(s.rss_kib / 1024, 1) for s in samples],
        "fds_connected": connected.fds,
        "fds_end": end.fds,
        "threads_end": end.threads,
        "server_cpu_share": (end.cpu_s - start.cpu_s) / window,
        "idle_feeds_cpu_share": (idle1.cpu_s - idle0.cpu_s) / (idle1.t - idle0.t),
        "client_cpu_share": (client1 - client0) / window,
        "machine_busy": ((machine1[0] - machine0[0]) / (machine1[1] - machine0[1])
                         if machine1[1] > machine0[1] else None),
        "window_s": window,
        "drain_s": drain_s,
        "settle_s": settle_s,
        "shutdown_s": shutdown_s,
        "exit_code": exit_code,
        "feeds_ended_on_shutdown": feeds_ended,
        "feeds_broken_on_shutdown": sum(n for k, n in load.transport_errors.items()
                                        if k.endswith("on shutdown")),
        "log_levels": dict(levels),
        "log_problems_before_stop": sum(not after_stop(r) for r in problems),
        "log_problems": [f"{'after SIGTERM' if after_stop(r) else 'under load'}: "
                         f"{r.get('level')} {r.get('logger')}: {str(r.get('message'))[:300]}"
                         for r in problems[:10]],
        "conversations": len(conversations),
        "watchers": watchers,
        "posters": posters,
    })
    return figures


# -- the run -----------------------------------------------------------------------------------


def raise_fd_limit(needed: int) -> tuple[int, int]:
    """Raise this process's soft RLIMIT_NOFILE (the server inherits it) to ``needed`` if the
    hard limit allows; returns the soft limit before and after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return soft, resource.getrlimit(resource.RLIMIT_NOFILE)[0]


async def main_async(args: argparse.Namespace) -> int:
    plan = QUICK if args.quick else FULL
    seconds = args.seconds or plan.seconds
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    started = time.perf_counter()
    # Each side holds a socket per watcher and per poster, plus its database files.
    fd_before, fd_after = raise_fd_limit(4 * (args.watchers + args.posters) + 256)
    if fd_after < 2 * (args.watchers + args.posters) + 64:
        log(f"[yellow]RLIMIT_NOFILE is {fd_after}: too few for {args.watchers} watchers[/]")
    results = Results()
    load_before = os.getloadavg()
    raw_before = raw_sqlite_commit_us(plan.raw_seconds)
    for backend in backends:
        prefix = "sqlite" if backend == "sqlite" else "pg"

        async def step(backend: str = backend) -> dict[str, Any]:
            return await run_backend(backend, args.postgres_dsn, plan, args.posters,
                                     args.watchers, seconds)

        figure = await guarded(results, f"{prefix}_load", step)
        if figure is not None:
            results.figures[prefix] = figure
    raw_after = raw_sqlite_commit_us(plan.raw_seconds)
    raw_us = (raw_before + raw_after) / 2

    def get(prefix: str, key: str) -> Any:
        return results.figures.get(prefix, {}).get(key)

    summary: dict[str, Any] = {}
    for prefix in ("sqlite", "pg"):
        for key in ("5xx", "lost_inputs", "post_p50_ms", "post_p99_ms", "lag_p50_ms",
                    "lag_p99_ms", "rss_growth_mib", "rss_start_mib", "rss_end_mib",
                    "inputs_acknowledged", "inputs_on_file", "posts_per_s", "watchers_behind"):
            summary[f"{prefix}_{key}"] = get(prefix, "fivexx" if key == "5xx" else key)
    summary["raw_sqlite_commit_us"] = raw_us
    failed = [p for p in ("sqlite", "pg") if p in results.figures and (
        get(p, "fivexx") or get(p, "lost_inputs") or get(p, "watchers_behind")
        or get(p, "watcher_gaps") or get(p, "watcher_repeats")
        or get(p, "feeds_broken_on_shutdown") or not get(p, "feeds_ended_on_shutdown"))]
    rss_ok = all((get(p, "rss_growth_mib") or 0) <= RSS_GOAL_MIB for p in results.figures)
    print_table(results, plan, seconds, raw_us)
    elapsed = time.perf_counter() - started
    out.print(f"total {elapsed:.0f}s")
    line = {
        **summary,
        "goals_met": {"no_5xx": all(not get(p, "fivexx") for p in results.figures),
                      "no_lost_inputs": all(not get(p, "lost_inputs") for p in results.figures),
                      "rss_growth_le_20_mib": rss_ok},
        "seconds": round(elapsed, 1), "errors": results.errors,
        "figures": {**results.figures, "raw_sqlite_commit_us_before": raw_before,
                    "raw_sqlite_commit_us_after": raw_after},
        "settings": {"plan": plan.name, "warmup_s": plan.warmup_s, "seconds": seconds,
                     "posters": args.posters, "watchers": args.watchers,
                     "principals": PRINCIPALS,
                     "conversations_per_poster": CONVERSATIONS_PER_POSTER,
                     "watcher_reconnect_s": list(RECONNECT_S), "model": "scripted (echo)",
                     "rlimit_nofile": [fd_before, fd_after],
                     "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
                     "cpus": os.cpu_count(),
                     "command": " ".join(["python", *sys.argv]),
                     "revision": source_revision()},
    }
    print(json.dumps(line))
    return 1 if results.errors or failed else 0


def print_table(results: Results, plan: Plan, seconds: float, raw_us: float) -> None:
    table = Table(title=f"tidings serve under load: {plan.name} plan, {seconds:.0f} s measured; "
                        f"raw SQLite commit p50 {raw_us:,.0f} µs")
    for column in ("figure", "SQLite", "PostgreSQL", "goal"):
        table.add_column(column)
    rows = (
        ("5xx responses", "fivexx", 0, "0"),
        ("inputs acknowledged", "inputs_acknowledged", 0, ""),
        ("inputs on file", "inputs_on_file", 0, ""),
        ("lost inputs", "lost_inputs", 0, "0"),
        ("posts per second", "posts_per_s", 1, ""),
        ("post p50 / ms", "post_p50_ms", 1, ""),
        ("post p99 / ms", "post_p99_ms", 1, ""),
        ("event lag p50 / ms", "lag_p50_ms", 1, ""),
        ("event lag p99 / ms", "lag_p99_ms", 1, ""),
        ("events delivered per second", "events_per_s", 0, ""),
        ("feed gaps / repeats / behind", None, 0, "0 / 0 / 0"),
        ("RSS ready / start / end MiB", None, 0, ""),
        ("RSS growth MiB (end - start)", "rss_growth_mib", 1, f"≤ {RSS_GOAL_MIB:.0f}"),
        ("server CPU share / client CPU share", None, 0, ""),
        ("machine busy", "machine_busy", 2, ""),
        ("shutdown s (exit code)", None, 0, ""),
        ("feeds broken by the shutdown", "feeds_broken_on_shutdown", 0, "0"),
    )
    for label, key, digits, goal in rows:
        cells = []
        for prefix in ("sqlite", "pg"):
            f = results.figures.get(prefix)
            if f is None:
                cells.append("-")
            elif key is not None:
                cells.append(fmt(f.get(key), digits))
            elif label.startswith("feed"):
                cells.append(f"{f['watcher_gaps']} / {f['watcher_repeats']} / "
                             f"{f['watchers_behind']}")
            elif label.startswith("RSS"):
                cells.append(f"{f['rss_ready_mib']:.1f} / {f['rss_start_mib']:.1f} / "
                             f"{f['rss_end_mib']:.1f}")
            elif label.startswith("server"):
                cells.append(f"{f['server_cpu_share']:.2f} / {f['client_cpu_share']:.2f}")
            else:
                cells.append(f"{f['shutdown_s']:.1f} ({f['exit_code']})")
        table.add_row(label, *cells, goal)
    out.print(table)
    for name, message in results.errors.items():
        out.print(f"[red]{name}[/red]: {message}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true",
                        help="the small plan: both backends in under two minutes")
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--postgres-dsn", default=DEFAULT_DSN)
    parser.add_argument("--seconds", type=float, default=0.0,
                        help="the measured window (default: 15 quick, 120 full)")
    parser.add_argument("--watchers", type=int, default=200)
    parser.add_argument("--posters", type=int, default=50)
    return parser.parse_args(argv)


def main() -> int:
    signal.signal(signal.SIGTERM, terminate)
    args = parse_args()
    log(f"bench/load.py ({'quick' if args.quick else 'full'} plan)")
    err.print("")
    return run_main(main_async, args)


if __name__ == "__main__":
    raise SystemExit(main())
