"""The A2A cursor benchmark: events lost or repeated when a stream is dropped and resumed.

    python bench/a2a_resume.py [--quick] [--streams 30] [--postgres-dsn DSN]

``tidings serve`` runs in a process of its own (a fresh SQLite file; with ``--postgres-dsn``,
a fresh PostgreSQL database and two server processes on it). Each stream is a
``SendStreamingMessage`` over JSON-RPC read by a plain SSE client (httpx-sse); it is dropped
after its first k events with an id (k = 1, 2, 3, ... in turn), then resumed with
``SubscribeToTask`` and ``Last-Event-ID`` -- on PostgreSQL on the other process -- to the
task's end. Half-way the server is stopped and started again while a dropped stream's task
goes on: that stream is resumed on the new server. The reference for each task is its whole
stream replayed from where it started. Lost events are those of the reference missing from
what the client got; repeated ones are ids the client got twice.

Progress goes to stderr; stdout gets, last, one JSON line: ``a2a_resume_lost_events`` (must
be 0), ``a2a_resume_repeated_events`` (must be 0), the streams and events counted, the
seconds taken.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from httpx_sse import connect_sse

CONFIG = """
[models.steps]
provider = "scripted"

[[models.steps.rules]]
when = { text_contains = "resume" }
reply = { tool_calls = [{ name = "shell", arguments = { command = "echo hi" } }] }

[[models.steps.rules]]
when = { tool_result = "shell" }
reply = { text = "one two three four", chunks = 4, chunk_delay = 0.05 }

[profiles.worker]
model = "steps"
tools = ["shell"]
"""
HEADERS = {"Authorization": "Bearer tok-a", "A2A-Version": "1.0"}
WAIT_S = 60.0


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class Server:
    """``tidings serve`` in a process of its own."""

    def __init__(self, database: str, config: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tidings", "serve", "--database", database, "--port",
             str(self.port), "--config", str(config), "--token", "alice=tok-a"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            assert self.process.poll() is None, "tidings serve exited"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            time.sleep(0.05)
        raise RuntimeError("tidings serve did not come up")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(WAIT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def stream(url: str, body: dict[str, Any], *, last: str | None = None,
           stop_after: int | None = None) -> Iterator[tuple[str | None, dict[str, Any]]]:
    """(the id an event brought, or None; the event), dropping the connection after
    ``stop_after`` events with an id."""
    headers = HEADERS if last is None else {**HEADERS, "Last-Event-ID": last}
    before = last or ""
    with httpx.Client(timeout=WAIT_S) as http, connect_sse(
        http, "POST", f"{url}/a2a/worker", json=body, headers=headers
    ) as source:
        identified = 0
        for sse in source.iter_sse():
            event = json.loads(sse.data)["result"]
            brought = sse.id if sse.id != before else None  # SSE keeps the last id
            before = sse.id
            yield brought, event
            identified += brought is not None
            if stop_after is not None and identified >= stop_after:
                return


def ids(seen: list[tuple[str | None, dict[str, Any]]]) -> list[str]:
    return [i for i, _ in seen[1:] if i is not None]


def start(url: str, k: int) -> tuple[str, list[tuple[str | None, dict[str, Any]]]]:
    seen = list(stream(url, rpc("SendStreamingMessage", {"message": {
        "messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "resume"}]}}),
        stop_after=k))
    return seen[0][1]["task"]["id"], seen


def resume(url: str, task_id: str, last: str) -> list[tuple[str | None, dict[str, Any]]]:
    return list(stream(url, rpc("SubscribeToTask", {"id": task_id}), last=last))


def wait_ended(url: str, task_id: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        got = httpx.post(f"{url}/a2a/worker", json=rpc("GetTask", {"id": task_id}),
                         headers=HEADERS, timeout=WAIT_S).json()
        if got["result"]["status"]["state"] in ("TASK_STATE_COMPLETED", "TASK_STATE_FAILED"):
            return
        time.sleep(0.02)
    raise RuntimeError(f"task {task_id} did not end")


def measure(database: str, config: Path, streams: int, cluster: bool) -> dict[str, int]:
    counts = {"streams": 0, "events": 0, "lost": 0, "repeated": 0}
    one = Server(database, config)
    other = Server(database, config) if cluster else one
    try:
        for n in range(streams):
            k = 1 + n % 4
            task_id, first = start(one.url, k)
            if n == streams // 2:  # a restart while the dropped stream's task goes on
                wait_ended(one.url, task_id)
                one.stop()
                one = Server(database, config)
                if not cluster:
                    other = one
            cursor = [i for i, _ in first if i is not None][-1]  # the last id the client saw
            rest = resume(other.url, task_id, cursor)
            whole = resume(one.url, task_id, str(first[0][0]))
            got = ids(first) + ids(rest)
            reference = ids(whole)
            counts["streams"] += 1
            counts["events"] += len(reference)
            counts["lost"] += len(set(reference) - set(got))
            counts["repeated"] += len(got) - len(set(got))
            log(f"stream {n + 1}/{streams}: dropped after {k}, {len(reference)} events, "
                f"lost {len(set(reference) - set(got))}, repeated {len(got) - len(set(got))}")
    finally:
        one.stop()
        other.stop()
    return counts


def postgres_database(dsn: str) -> tuple[str, str]:
    """A fresh database on the server of ``dsn``: (its URL, its name)."""
    import psycopg

    name = f"tidings_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return dsn.rsplit("/", 1)[0] + "/" + name, name


def drop_database(dsn: str, name: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="8 streams")
    parser.add_argument("--streams", type=int, default=40)
    parser.add_argument("--postgres-dsn", default=os.environ.get("TIDINGS_BENCH_POSTGRES_DSN"))
    args = parser.parse_args()
    streams = 8 if args.quick else args.streams
    t0 = time.monotonic()
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as scratch:
        config = Path(scratch) / "tidings.toml"
        config.write_text(CONFIG, "utf-8")
        log("SQLite: one server, restarted half-way")
        runs = {"sqlite": measure(str(Path(scratch) / "bench.db"), config, streams, False)}
        if args.postgres_dsn:
            log("PostgreSQL: two server processes, resumed on the other, one restarted")
            url, name = postgres_database(args.postgres_dsn)
            try:
                runs["postgres"] = measure(url, config, streams, True)
            finally:
                drop_database(args.postgres_dsn, name)
    figures["a2a_resume_lost_events"] = sum(r["lost"] for r in runs.values())
    figures["a2a_resume_repeated_events"] = sum(r["repeated"] for r in runs.values())
    for backend, counts in runs.items():
        figures[f"{backend}_streams"] = counts["streams"]
        figures[f"{backend}_events"] = counts["events"]
    figures["seconds"] = round(time.monotonic() - t0, 1)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
