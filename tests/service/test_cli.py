"""A3 and A6: the command line, through real subprocesses -- ``tidings serve`` as a real server
process, ``post`` and ``watch`` as its clients, ``status`` and ``dead-letters`` reading the
database directly -- on both backends."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from tests.conftest import Backend
from tests.waiting import START_S, eventually_sync, wait_for_output, wait_serving
from tidings.clock import ManualClock, SystemClock
from tidings.conversations.catalog import Conversations
from tidings.models.scripted import Rule, ScriptedModel
from tidings.records.outbox import Outbox, OutboxConfig
from tidings.runtime.root import Runtime
from tidings.types import Profile

WAIT_S = 30.0  # a bound on waiting for something the test arranged; never asserted on
# Wide enough that rich never wraps a cell or a line the tests look for.
ENV = {**os.environ, "COLUMNS": "250"}


def tidings(*args: str, env: Mapping[str, str] | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``python -m tidings ARGS`` to completion."""
    return subprocess.run(
        [sys.executable, "-m", "tidings", *args],
        capture_output=True, text=True, timeout=timeout, check=False,
        env={**ENV, **(env or {})},
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], expected: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert expected in lines[0]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Lines:
    """A child process's stream, read line by line in a thread (so waits have a deadline)."""

    def __init__(self, stream: IO[str]) -> None:
        self.seen: list[str] = []
        """The lines the waits have looked at (all of them after :meth:`rest`)."""
        self._read: list[str] = []
        self._ended = False
        self._arrived = threading.Condition()
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: IO[str]) -> None:
        with stream:
            for line in stream:
                with self._arrived:
                    self._read.append(line.rstrip("\n"))
                    self._arrived.notify_all()
        with self._arrived:
            self._ended = True
            self._arrived.notify_all()

    def wait_for(self, pattern: str, within_s: float = START_S) -> re.Match[str]:
        """The first line (seen before or arriving now) that matches ``pattern``."""
        regex = re.compile(pattern)
        for line in self.seen:
            if found := regex.search(line):
                return found

        def next_match() -> re.Match[str] | None:
            while len(self.seen) < len(self._read):
                line = self._read[len(self.seen)]
                self.seen.append(line)
                if found := regex.search(line):
                    return found
            return None

        return wait_for_output(self._arrived, next_match, ended=lambda: self._ended,
                               what=f"a line matching {pattern!r}", within_s=within_s,
                               shown=lambda: self.seen[-20:])

    def so_far(self) -> list[str]:
        """Every line read until now (the stream may go on)."""
        with self._arrived:
            return list(self._read)

    def rest(self) -> list[str]:
        """Every line, once the stream has ended."""
        self._thread.join(WAIT_S)
        with self._arrived:
            self.seen.extend(self._read[len(self.seen):])
        return self.seen


class Served:
    """``tidings serve`` in a process of its own."""

    def __init__(self, database: str, *args: str, port: int | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        self._chosen = port is not None
        self._argv = [sys.executable, "-m", "tidings", "serve", "--database", database, *args]
        self._env = {**ENV, **(env or {})}
        self._spawn(port or free_port())

    def _spawn(self, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [*self._argv, "--port", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=self._env,
        )
        assert self.process.stderr is not None
        self.logs = Lines(self.process.stderr)

    def wait_ready(self) -> Served:
        """Until this server answers. Its own log says first that it listens -- it binds the
        port before its runtime starts -- so a server another test started on the same free
        port can never answer in its place; a port taken meanwhile is given up for another."""
        for _ in range(3):
            said = self.logs.wait_for(r"runtime started|is already in use")
            if said.group(0) == "runtime started" or self._chosen:
                break
            self.process.wait(WAIT_S)
            self._spawn(free_port())
        wait_serving(self.url, process=self.process,
                     output=lambda: self.logs.so_far() if self.process.poll() is None
                     else self.logs.rest())
        return self

    def stop(self, signum: int = signal.SIGTERM) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signum)
        return self.process.wait(WAIT_S)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(WAIT_S)


def scripted(folder: Path, rules: Mapping[str, Any]) -> str:
    """``scripted:RULES.json`` for ``--model``: the scripted model's rules, written to
    ``folder``."""
    path = folder / "rules.json"
    path.write_text(json.dumps(rules), "utf-8")
    return f"scripted:{path}"


@contextlib.contextmanager
def served(database: str, *args: str, port: int | None = None,
           env: Mapping[str, str] | None = None) -> Iterator[Served]:
    server = Served(database, *args, port=port, env=env)
    try:
        yield server.wait_ready()
    finally:
        server.kill()


def open_conversation(url: str, token: str, *tools: str) -> str:
    response = httpx.post(f"{url}/v1/conversations",
                          json={"profile": {"model": "scripted", "tools": list(tools)}},
                          headers={"Authorization": f"Bearer {token}"}, timeout=WAIT_S)
    assert response.status_code == 201, response.text
    return str(response.json()["conversation_id"])


def json_lines(lines: list[str]) -> list[dict[str, Any]]:
    """Every line must be one JSON object with the structured-log keys."""
    entries = [json.loads(line) for line in lines if line.strip()]
    for entry in entries:
        assert {"ts", "level", "logger", "message"} <= entry.keys(), entry
    return entries


# -- serve, post, watch -------------------------------------------------------------------------


def test_a3_serve_answers_health_and_authenticated_requests_and_stops_on_sigterm(
    backend: Backend,
) -> None:
    with served(backend.url, "--token", "alice=tok-a", "--operator-token", "op-1",
                "--json-logs", "--access-log") as server:
        health = httpx.get(f"{server.url}/health", timeout=WAIT_S)
        assert health.status_code == 200
        assert httpx.post(f"{server.url}/v1/conversations",
                          json={"profile": {"model": "scripted"}}, timeout=WAIT_S
                          ).status_code == 401
        conversation = open_conversation(server.url, "tok-a")
        listed = httpx.get(f"{server.url}/v1/conversations",
                           headers={"Authorization": "Bearer tok-a"}, timeout=WAIT_S)
        assert [c["conversation_id"] for c in listed.json()["items"]] == [conversation]
        stats = httpx.get(f"{server.url}/v1/signals/stats",
                          headers={"Authorization": "Bearer op-1"}, timeout=WAIT_S)
        assert stats.status_code == 200, stats.text

        assert server.stop(signal.SIGTERM) == 0
    # A6: structured logs, one JSON object per line, extra fields at the top level.
    entries = json_lines(server.logs.rest())
    started = next(e for e in entries if e["message"] == "runtime started")
    assert started["instance_id"].startswith("inst_")
    assert started["logger"] == "tidings.cli"
    assert any(e["logger"] == "uvicorn.access" for e in entries)  # asked for: a line each
    assert entries[-1]["message"] == "stopped"
    assert entries[-1]["instance_id"] == started["instance_id"]


def test_a3_serve_reads_tokens_and_log_format_from_the_environment(tmp_path: Path) -> None:
    env = {"TIDINGS_TOKENS": "alice=tok-a, bob=tok-b", "TIDINGS_LOG_FORMAT": "json"}
    with served(str(tmp_path / "env.db"), env=env) as server:
        mine = open_conversation(server.url, "tok-b")
        foreign = httpx.get(f"{server.url}/v1/conversations/{mine}",
                            headers={"Authorization": "Bearer tok-a"}, timeout=WAIT_S)
        assert foreign.status_code == 404  # a principal sees only its own
        assert server.stop(signal.SIGINT) == 0  # Ctrl-C is a graceful stop too
    entries = json_lines(server.logs.rest())
    assert entries[-1]["message"] == "stopped"
    # Without --access-log (or the config file's access_log), no line per request.
    assert not any(e["logger"] == "uvicorn.access" for e in entries)


RESTART_RULES = {
    "rules": [
        {"when": {"text_contains": "restart please"},
         "reply": {"tool_calls": [{"name": "restart", "arguments": {"reason": "new config"}}]}},
        {"when": {"tool_result": "restart"}, "reply": {"text": "Restart accepted."}},
        {"when": {"suffix_contains": "restart_completed"},
         "reply": {"text": "I am back after the restart."}},
    ],
    "default": {"text": "ok"},
}


def _health(url: str) -> str | None:
    with contextlib.suppress(httpx.HTTPError):
        response = httpx.get(f"{url}/health", timeout=2)
        if response.status_code == 200:
            return str(response.json()["instance_id"])
    return None


def test_l2_serve_honours_a_requested_restart_with_a_new_instance(tmp_path: Path) -> None:
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps(RESTART_RULES), "utf-8")
    with served(str(tmp_path / "restart.db"), "--token", "alice=tok-a", "--json-logs",
                "--model", f"scripted:{rules}") as server:
        before = _health(server.url)
        conversation = open_conversation(server.url, "tok-a", "restart")
        assert tidings("post", "--url", server.url, "--token", "tok-a", conversation,
                       "restart please").returncode == 0
        # The host honours the accepted restart: the process re-executes itself (same pid),
        # and the new instance completes the restart with one completion turn.
        def instance() -> str | None:
            assert server.process.poll() is None, server.logs.rest()
            return _health(server.url)

        after = eventually_sync(instance, lambda seen: seen not in (None, before),
                                what="a new instance answers /health", within_s=WAIT_S,
                                poll_s=0.05)

        def answers_now() -> list[str]:
            transcript = httpx.get(f"{server.url}/v1/conversations/{conversation}/transcript",
                                   headers={"Authorization": "Bearer tok-a"}, timeout=WAIT_S)
            return [m["content"] for m in transcript.json()["items"] if m["role"] == "assistant"]

        answers = eventually_sync(answers_now,
                                  lambda answers: "I am back after the restart." in answers,
                                  what="the completion turn's answer", within_s=WAIT_S,
                                  poll_s=0.05)
        assert answers == ["", "Restart accepted.", "I am back after the restart."]
        assert server.stop() == 0
    entries = json_lines(server.logs.rest())
    started = [e["instance_id"] for e in entries if e["message"] == "runtime started"]
    assert started == [before, after]
    assert any(e["message"] == "a restart was requested: restarting" for e in entries)


def test_a3_serve_refuses_bad_options_in_one_line(tmp_path: Path) -> None:
    result = tidings("serve", "--database", str(tmp_path / "x.db"), "--token", "no-equals-sign")
    assert result.returncode == 2
    assert "expected PRINCIPAL=TOKEN" in result.stderr
    assert "Traceback" not in result.stderr
    result = tidings("serve", "--database", str(tmp_path / "x.db"), "--model", "gpt:x")
    assert result.returncode == 2
    assert "unknown model 'gpt:x'" in result.stderr
    result = tidings("serve", "--database", "mysql://nowhere/db", "--token", "a=b")
    assert result.returncode != 0
    assert "invalid_input: unsupported database URL" in result.stderr
    assert "Traceback" not in result.stderr


def test_a3_serve_on_a_busy_port_fails_cleanly(tmp_path: Path) -> None:
    with served(str(tmp_path / "one.db"), "--token", "a=t") as first:
        second = tidings("serve", "--database", str(tmp_path / "two.db"), "--token", "a=t",
                         "--port", str(first.port))
        assert second.returncode == 1
        assert second.stderr.strip().splitlines()[-1] == (
            f"Error: port {first.port} is already in use on 127.0.0.1: stop what listens "
            "there, or choose another with --port")
        assert "Traceback" not in second.stderr
        assert httpx.get(f"{first.url}/health", timeout=WAIT_S).status_code == 200


def watch_process(url: str, token: str, conversation: str, *args: str,
                  stderr: int = subprocess.DEVNULL) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tidings", "watch", "--url", url, "--token", token,
         conversation, *args],
        stdout=subprocess.PIPE, stderr=stderr, text=True, env=ENV,
    )


def test_a3_post_prints_the_input_id_and_watch_follows_the_feed(tmp_path: Path) -> None:
    with served(str(tmp_path / "feed.db"), "--token", "alice=tok-a") as server:
        conversation = open_conversation(server.url, "tok-a")
        posted = tidings("post", "--url", server.url, "--token", "tok-a", conversation,
                         "hello there")
        assert posted.returncode == 0, posted.stderr
        input_id = posted.stdout.strip()
        assert re.fullmatch(r"in_[0-9a-f]+", input_id)

        watcher = watch_process(server.url, "tok-a", conversation, stderr=subprocess.PIPE)
        assert watcher.stdout is not None
        lines = Lines(watcher.stdout)
        try:
            lines.wait_for(rf"input_accepted person input {input_id} from alice")
            lines.wait_for(r"turn_status run run_[0-9a-f]+ completed")
            # --after starts later in the journal: the first events are not repeated.
            later = watch_process(server.url, "tok-a", conversation, "--after", "2")
            assert later.stdout is not None
            later_lines = Lines(later.stdout)
            later_lines.wait_for(r"turn_status run run_[0-9a-f]+ completed")
            later.send_signal(signal.SIGINT)
            assert later.wait(WAIT_S) == 0
            assert all(int(line.split()[0]) > 2 for line in later_lines.rest())
        finally:
            watcher.send_signal(signal.SIGINT)  # Ctrl-C ends it, quietly
            assert watcher.wait(WAIT_S) == 0
        assert watcher.stderr is not None
        with watcher.stderr:
            assert "Traceback" not in watcher.stderr.read()


def test_a3_watch_reconnects_with_last_event_id_across_a_server_restart(tmp_path: Path) -> None:
    database = str(tmp_path / "restart.db")
    first = Served(database, "--token", "alice=tok-a").wait_ready()
    try:
        conversation = open_conversation(first.url, "tok-a")
        watcher = watch_process(first.url, "tok-a", conversation)
        assert watcher.stdout is not None
        lines = Lines(watcher.stdout)
        try:
            assert tidings("post", "--url", first.url, "--token", "tok-a", conversation,
                           "before").returncode == 0
            lines.wait_for(r"turn_status run \S+ completed")
            assert first.stop() == 0
            with served(database, "--token", "alice=tok-a", port=first.port) as second:
                after = tidings("post", "--url", second.url, "--token", "tok-a",
                                conversation, "after").stdout.strip()
                lines.wait_for(rf"input_accepted person input {after}")
                lines.wait_for(rf"input_materialized input {after}")
        finally:
            watcher.send_signal(signal.SIGINT)
            assert watcher.wait(WAIT_S) == 0
        seqs = [int(line.split()[0]) for line in lines.rest()]
        # Every journal row once, in order, across the reconnect: nothing lost, nothing twice.
        assert seqs == list(range(1, len(seqs) + 1))
    finally:
        first.kill()


def test_a3_client_commands_refuse_in_one_line(tmp_path: Path) -> None:
    with served(str(tmp_path / "refuse.db"), "--token", "alice=tok-a") as server:
        assert_one_line_error(
            tidings("post", "--url", server.url, "--token", "tok-a", "conv_nope", "hi"),
            "unknown_conversation")
        assert_one_line_error(
            tidings("post", "--url", server.url, "--token", "wrong", "conv_nope", "hi"),
            "unauthorized")
        assert_one_line_error(
            tidings("watch", "--url", server.url, "--token", "tok-a", "conv_nope"),
            "unknown_conversation")
    assert_one_line_error(
        tidings("post", "--url", f"http://127.0.0.1:{free_port()}", "--token", "t", "c", "hi"),
        "cannot reach")


# -- status, dead-letters -------------------------------------------------------------------------


async def _seed(url: str) -> tuple[str, str]:
    """A conversation with one ready signal and one dead letter; returns (conversation, event)."""
    clock = ManualClock(SystemClock().now_us())
    async with Outbox.open(url, clock=clock, config=OutboxConfig(max_attempts=1)) as outbox:
        conversation = (await Conversations(outbox.store, clock).create(
            "alice", Profile(model="scripted"))).conversation_id
        dead = await outbox.store.transact(lambda tx: outbox.publish(
            tx, conversation, "job.finished", {"n": 1}, idempotency_key="one"))
        lease = await outbox.claim(conversation, owner="run-1")
        await outbox.release(lease, "model_unavailable")
        clock.advance(timedelta(seconds=3))
        await outbox.store.transact(lambda tx: outbox.publish(
            tx, conversation, "job.finished", {"n": 2}, idempotency_key="two"))
        clock.advance(timedelta(seconds=2))
    return conversation, dead.event_id


def _row(output: str, first_cell: str) -> list[str]:
    line = next(line for line in output.splitlines() if f"│ {first_cell}" in line)
    return [cell.strip() for cell in line.strip("│ ").split("│")]


def test_a3_status_and_dead_letters_read_the_database(backend: Backend) -> None:
    conversation, event_id = asyncio.run(_seed(backend.url))

    result = tidings("status", "--database", backend.url)
    assert result.returncode == 0, result.stderr
    # conversation, backlog, ready, leased, oldest age, retried, max attempts, dead letters
    assert _row(result.stdout, "(all)")[:4] == ["(all)", "1", "1", "0"]
    assert _row(result.stdout, "(all)")[-1] == "1"
    assert "1 dead letter(s): tidings dead-letters" in result.stdout

    result = tidings("status", "--database", backend.url, "--conversation", conversation)
    assert result.returncode == 0, result.stderr
    assert _row(result.stdout, conversation)[1] == "1"

    for scope in ((), ("--conversation", conversation)):
        result = tidings("dead-letters", "--database", backend.url, *scope)
        assert result.returncode == 0, result.stderr
        assert "dead letters (1)" in result.stdout
        row = _row(result.stdout, "1")
        assert row[1:6] == [event_id, conversation, "job.finished", "1", "model_unavailable"]


MODEL = ScriptedModel(rules=[Rule({"text_contains": "deploy"}, {"tool_calls": [{
    "name": "shell", "arguments": {"command": "sleep 30", "background": True}}]})],
    default={"text": "ok"})


async def _status_while_running(url: str) -> tuple[str, str, str, str]:
    async with Runtime.open(url, models=[MODEL]) as rt:
        conversation = (await rt.create_conversation(
            "alice", Profile(model="scripted", tools=("shell",)))).conversation_id
        await rt.post(conversation, "deploy")
        await rt.settle(conversation)
        [task] = await rt.tasks.list(conversation)
        status = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tidings", "status", "--database", url,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=ENV)
        out, err = await status.communicate()
        assert status.returncode == 0, err.decode()
        return out.decode(), rt.instance_id, conversation, task.task_key


def test_a3_status_shows_live_instances_and_running_tasks(backend: Backend) -> None:
    out, instance_id, conversation, task_key = asyncio.run(_status_while_running(backend.url))
    assert _row(out, instance_id)[1] == "live"
    row = _row(out, conversation)
    assert row[1:3] == [task_key, "running"]
    assert row[-1] == "sleep 30"


def test_a3_inspection_refuses_bad_input_in_one_line(backend: Backend) -> None:
    asyncio.run(_seed(backend.url))
    for command in ("status", "dead-letters"):
        assert_one_line_error(
            tidings(command, "--database", backend.url, "--conversation", "conv_nope"),
            "unknown_conversation: no conversation 'conv_nope'")
        assert_one_line_error(tidings(command, "--database", "mysql://nowhere/db"),
                              "invalid_input: unsupported database URL")
    assert_one_line_error(tidings("status", "--database", "/nonexistent/tidings.db"),
                          "invalid_input: no database at /nonexistent/tidings.db")


@pytest.mark.parametrize("command", ["status", "dead-letters"])
def test_a3_inspection_registers_no_instance(tmp_path: Path, command: str) -> None:
    """Reading is read only: no instance is registered, nothing is reconciled."""
    database = str(tmp_path / "quiet.db")
    asyncio.run(_seed(database))

    def instances() -> int:
        import sqlite3

        with contextlib.closing(sqlite3.connect(database)) as db:
            return int(db.execute("SELECT count(*) FROM instances").fetchone()[0])

    before = instances()
    assert tidings(command, "--database", database).returncode == 0
    assert instances() == before
