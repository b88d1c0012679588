"""P3: durable A2A push notifications, against ``tidings serve`` and a real webhook receiver on
loopback, both backends. A task held for approval gets configs; deciding it makes ``working``
then ``completed``, published with the run's own commits:

- a receiver that fails its first calls gets each notification at least once, with one stable
  id across attempts, the config's token (kept sealed under the master key) and the A2A body,
  in order;
- a redirect is not followed; past the budget the notification is a dead letter, listed over
  HTTP and by the CLI, and nothing tries it again;
- a deleted config is sent nothing more;
- a SIGKILL between the commit and the delivery delays it, never loses it.

The address checks themselves (private, loopback, link-local refused unless allowed) are
pure: :func:`test_p3_private_targets_refused_unless_allowed`.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import Client
from a2a.types.a2a_pb2 import (
    DeleteTaskPushNotificationConfigRequest,
    StreamResponse,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError
from google.protobuf.json_format import ParseDict

from tests.conftest import Backend
from tests.scenarios.test_locked import database_rows
from tests.service.test_cli import ENV, WAIT_S, Served
from tests.service.test_p1_a2a import a2a, one_task, said
from tests.waiting import eventually
from tidings.errors import InvalidInputError, PrivateTargetError
from tidings.push.targets import resolve

CONFIG = """
[models.echo]
provider = "scripted"

[[models.echo.rules]]
when = { text_contains = "list files" }
reply = { tool_calls = [{ name = "shell", arguments = { command = "echo hi" } }] }

[[models.echo.rules]]
when = { tool_result = "shell" }
reply = { text = "Listed." }

[profiles.careful]
model = "echo"
tools = ["shell"]
approval_mode = "always"

[push]
allow_private = true
max_attempts = 3
backoff_seconds = 0.05
backoff_cap_seconds = 0.1
timeout_seconds = 2
"""


class Receiver:
    """A webhook receiver on loopback: each path answers 503 to its first ``fail[path]`` calls
    (``down`` paths always), ``/redirect`` answers 307 to ``/elsewhere``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, str], dict[str, Any], int]] = []
        self.fail: dict[str, int] = {}
        self.down: set[str] = set()
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with receiver.lock:
                    seen = sum(1 for c in receiver.calls if c[0] == self.path)
                    if self.path == "/redirect":
                        status = 307
                    elif self.path in receiver.down or seen < receiver.fail.get(self.path, 0):
                        status = 503
                    else:
                        status = 200
                    receiver.calls.append((self.path, dict(self.headers), body, status))
                self.send_response(status)
                if status == 307:
                    self.send_header("Location", "/elsewhere")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def to(self, path: str) -> list[tuple[dict[str, str], dict[str, Any], int]]:
        with self.lock:
            return [(h, b, s) for p, h, b, s in self.calls if p == path]

    def received(self, path: str) -> list[tuple[str, int]]:
        """What ``path`` took (answered 200), as (notification id, state) in arrival order."""
        return [(h["X-A2A-Notification-Id"], ParseDict(b, StreamResponse()).status_update
                 .status.state) for h, b, s in self.to(path) if s == 200]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver()
    try:
        yield made
    finally:
        made.close()


def serve(backend: Backend, tmp_path: Path, *, max_attempts: int = 3) -> Served:
    config = tmp_path / "tidings.toml"
    config.write_text(CONFIG.replace("max_attempts = 3", f"max_attempts = {max_attempts}"),
                      "utf-8")
    return Served(backend.url, "--config", str(config), "--token", "alice=tok-a",
                  "--operator-token", "op", env={"TIDINGS_MASTER_KEY": MASTER_KEY}).wait_ready()


async def held_task(client: Client) -> tuple[str, str]:
    task = await one_task(client, said("list files"))
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, task
    return task.id, task.context_id


async def hook(client: Client, task_id: str, config_id: str, url: str) -> None:
    await client.create_task_push_notification_config(TaskPushNotificationConfig(
        task_id=task_id, id=config_id, url=url, token=f"token-{config_id}"))


MASTER_KEY = "ab" * 32
WORKING, COMPLETED = TaskState.TASK_STATE_WORKING, TaskState.TASK_STATE_COMPLETED


async def test_p3_push_at_least_once_in_order_dead_letters_and_deleted_configs(
    backend: Backend, tmp_path: Path, receiver: Receiver,
) -> None:
    server = serve(backend, tmp_path)
    try:
        url = f"{server.url}/a2a/careful"
        async with a2a(url, "tok-a") as alice:
            task_id, context_id = await held_task(alice)
            receiver.fail["/flaky"] = 2
            receiver.down.add("/down")
            await hook(alice, task_id, "flaky", f"{receiver.url}/flaky")
            await hook(alice, task_id, "redirect", f"{receiver.url}/redirect")
            await hook(alice, task_id, "down", f"{receiver.url}/down")
            await hook(alice, task_id, "gone", f"{receiver.url}/gone")
            await alice.delete_task_push_notification_config(
                DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="gone"))
            assert (await one_task(alice, said("approve", task_id=task_id))).status.state \
                == COMPLETED

            # Each notification at least once, in order, one id across its attempts.
            got = await eventually(lambda: _now(receiver.received("/flaky")),
                                   lambda r: len(r) == 2, what="both notifications")
            assert [state for _, state in got] == [WORKING, COMPLETED]
            attempts = receiver.to("/flaky")
            assert [s for _, _, s in attempts] == [503, 503, 200, 200]
            ids = [h["X-A2A-Notification-Id"] for h, _, _ in attempts]
            assert ids[0] == ids[1] == ids[2] != ids[3]
            assert {h["X-A2A-Notification-Token"] for h, _, _ in attempts} == {"token-flaky"}
            update = ParseDict(attempts[-1][1], StreamResponse()).status_update
            assert (update.task_id, update.context_id) == (task_id, context_id)
            # The token was sent as given, and is kept sealed under the master key.
            kept = database_rows(backend.url)["a2a_push_configs"]
            assert all("sealed:v1:" in row for row in kept)
            assert not any("token-" in row for row in kept)

            # A redirect is not followed; past the budget each is a dead letter, left alone.
            letters = await eventually(
                lambda: _dead_letters(server.url), lambda d: len(d) >= 4,
                what="the redirect's and the down hook's dead letters")
            by_config = {(d["config_id"], d["failure_code"]) for d in letters}
            assert ("redirect", "redirect") in by_config
            assert all(d["attempts"] == 3 for d in letters)
            assert receiver.to("/elsewhere") == []
            tried = len(receiver.to("/redirect"))
            assert tried == 6  # two notifications, three attempts each

            # A deleted config: nothing, and the down one is deleted with nothing owed.
            await alice.delete_task_push_notification_config(
                DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="down"))
            before = len(receiver.to("/down"))
            await asyncio.sleep(0.5)  # backoff is 50-100 ms here: a retry would have come
            assert len(receiver.to("/redirect")) == tried
            assert len(receiver.to("/down")) == before
            assert receiver.to("/gone") == []

        # The CLI lists them too (it reads the database).
        shown = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "tidings", "dead-letters", "--webhooks", "--database",
             backend.url], capture_output=True, text=True, env=ENV, timeout=WAIT_S)
        assert shown.returncode == 0, shown.stderr
        assert f"{task_id}." in shown.stdout
        assert "redirect" in shown.stdout
    finally:
        server.kill()


async def test_p3_sigkill_between_commit_and_delivery_still_delivers(
    backend: Backend, tmp_path: Path, receiver: Receiver,
) -> None:
    # A budget the outage cannot spend before the kill, however slow the machine.
    server = serve(backend, tmp_path, max_attempts=100)
    try:
        async with a2a(f"{server.url}/a2a/careful", "tok-a") as alice:
            task_id, _ = await held_task(alice)
            receiver.down.add("/late")
            await hook(alice, task_id, "late", f"{receiver.url}/late")
            assert (await one_task(alice, said("approve", task_id=task_id))).status.state \
                == COMPLETED
        server.kill()  # SIGKILL: committed, not delivered
    finally:
        server.kill()
    receiver.down.clear()
    again = serve(backend, tmp_path, max_attempts=100)
    try:
        # A lease the kill left lasts the attempt's timeout and 5 s; a loaded machine is slow.
        got = await eventually(lambda: _now(receiver.received("/late")),
                               lambda r: len(r) == 2, what="both, after the restart",
                               within_s=60)
        assert [state for _, state in got] == [WORKING, COMPLETED]
    finally:
        again.kill()


async def test_p3_private_targets_refused_unless_allowed() -> None:
    for url in ("http://127.0.0.1:9/hook", "http://localhost/hook", "http://[::1]/hook",
                "http://10.1.2.3/hook", "http://169.254.169.254/latest",
                "http://[::ffff:192.168.1.1]/hook", "http://100.64.0.1/hook"):
        with pytest.raises(PrivateTargetError):
            await resolve(url, allow_private=False)
    assert str((await resolve("http://127.0.0.1:9/hook", allow_private=True)).address) \
        == "127.0.0.1"
    assert (await resolve("https://93.184.215.14/hook", allow_private=False)).connect_url() \
        == "https://93.184.215.14:443/hook"
    for url in ("ftp://example.com/x", "http:///x", "file:///etc/passwd"):
        with pytest.raises(InvalidInputError):
            await resolve(url, allow_private=True)


async def _now(value: Any) -> Any:
    return value


async def _dead_letters(url: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(timeout=WAIT_S) as http:
        response = await http.get(f"{url}/v1/push-dead-letters",
                                  headers={"Authorization": "Bearer op"})
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


async def test_p3_a_push_config_sent_with_the_message_hears_of_its_task(
    backend: Backend, tmp_path: Path, receiver: Receiver,
) -> None:
    """A config in SendMessage's configuration is the new task's from its first state; one
    whose target is refused refuses the message, and nothing is posted."""
    server = serve(backend, tmp_path)
    try:
        async with a2a(f"{server.url}/a2a/careful", "tok-a") as alice:
            request = said("list files")
            request.configuration.task_push_notification_config.CopyFrom(
                TaskPushNotificationConfig(id="sent", url=f"{receiver.url}/sent", token="t-s"))
            task = await one_task(alice, request)
            assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, task
            assert (await one_task(alice, said("approve", task_id=task.id))).status.state \
                == COMPLETED
            got = await eventually(lambda: _now(receiver.received("/sent")),
                                   lambda r: bool(r) and r[-1][1] == COMPLETED,
                                   what="the task's notifications to its end")
            # From its first state on: the hold for approval too, when it came after the
            # config (the run may reach it before the message is answered).
            assert [state for _, state in got] in (
                [WORKING, COMPLETED], [TaskState.TASK_STATE_INPUT_REQUIRED, WORKING, COMPLETED])
            assert all(n.startswith(f"{task.id}.") for n, _ in got)

            refused = said("list files again")
            refused.configuration.task_push_notification_config.CopyFrom(
                TaskPushNotificationConfig(id="bad", url="ftp://127.0.0.1/hook"))
            with pytest.raises(InvalidParamsError, match="http"):
                await one_task(alice, refused)
        async with httpx.AsyncClient(headers={"Authorization": "Bearer tok-a"}) as http:
            listed = (await http.get(f"{server.url}/v1/conversations")).json()["items"]
        assert len(listed) == 1  # the refused message opened nothing
    finally:
        server.kill()
