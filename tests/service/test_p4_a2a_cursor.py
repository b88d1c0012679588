"""P4: an A2A stream resumes from the last event the client saw (``Last-Event-ID``), with no
loss and no duplicate -- on the same server, across a ``tidings serve`` restart, and (on
PostgreSQL) on another process of the cluster; and the docs' example.

A plain SSE client (httpx + httpx-sse) speaks JSON-RPC and reads the ``id:`` lines; the
``a2a-sdk`` client resumes too, with the position its events carry in their metadata. The
reference for "every event once" is the whole task replayed from the start of its stream."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import ClientCallContext
from a2a.types.a2a_pb2 import GetTaskRequest, StreamResponse, SubscribeToTaskRequest, TaskState
from httpx_sse import connect_sse

from tests.conftest import Backend
from tests.service.test_cli import WAIT_S, Served
from tests.service.test_p1_a2a import a2a
from tests.waiting import eventually_sync

CONFIG = """
[models.steps]
provider = "scripted"

[[models.steps.rules]]
when = { text_contains = "list files" }
reply = { tool_calls = [{ name = "shell", arguments = { command = "echo hi" } }] }

[[models.steps.rules]]
when = { tool_result = "shell" }
reply = { text = "one two three four", chunks = 4, chunk_delay = 0.05 }

[profiles.worker]
model = "steps"
tools = ["shell"]
"""

HEADERS = {"Authorization": "Bearer tok-a", "A2A-Version": "1.0"}
Seen = tuple[str | None, dict[str, Any]]
"""One SSE event: its id and its A2A event (the JSON-RPC result)."""


def serve(database: str, config: Path) -> Served:
    return Served(database, "--config", str(config), "--token", "alice=tok-a").wait_ready()


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "tidings.toml"
    path.write_text(CONFIG, "utf-8")
    return path


def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def stream(url: str, body: dict[str, Any], *, last: str | None = None,
           stop_after: int | None = None) -> Iterator[Seen]:
    """The stream's events; ``stop_after``: drop the connection after that many events with
    an id."""
    headers = HEADERS if last is None else {**HEADERS, "Last-Event-ID": last}
    last_id = last or ""
    with httpx.Client(timeout=WAIT_S) as http, connect_sse(
        http, "POST", f"{url}/a2a/worker", json=body, headers=headers
    ) as source:
        assert source.response.status_code == 200, source.response.read()
        identified = 0
        for sse in source.iter_sse():
            assert sse.event == "message", sse.data
            event = json.loads(sse.data)["result"]
            seq = position(event)
            # An event with a position has it as its id; one without (a live delta) has no
            # id line, so the last id (kept by the client, as SSE says) stays the last position.
            assert sse.id == (str(seq) if seq is not None else last_id), (sse.id, event)
            last_id = sse.id
            yield (None if seq is None else sse.id), event
            identified += seq is not None
            if stop_after is not None and identified >= stop_after:
                return  # leaving the block closes the connection mid-stream


def position(event: dict[str, Any]) -> int | None:
    """The journal position an A2A event carries in its metadata, if any."""
    payload = next(iter(event.values()))
    seq = payload.get("metadata", {}).get("tidings", {}).get("seq")
    return None if seq is None else int(seq)


def start(url: str) -> tuple[str, list[Seen]]:
    """Send a message on a stream and drop it after the task and the first event."""
    seen = list(stream(url, rpc("SendStreamingMessage", {"message": {
        "messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "list files"}]}}),
        stop_after=2))
    return seen[0][1]["task"]["id"], seen


def resume(url: str, task_id: str, last: str) -> list[Seen]:
    return list(stream(url, rpc("SubscribeToTask", {"id": task_id}), last=last))


def journal_ids(seen: list[Seen]) -> list[str]:
    """The ids of the events after the task that opens every stream."""
    assert "task" in seen[0][1], seen[0]
    ids = [i for i, _ in seen[1:] if i is not None]
    assert len(ids) == len(set(ids)), ids
    return ids


def final_state(seen: list[Seen]) -> str:
    return str(seen[-1][1]["statusUpdate"]["status"]["state"])


def wait_completed(url: str, task_id: str) -> None:
    def state() -> str:
        got = httpx.post(f"{url}/a2a/worker", json=rpc("GetTask", {"id": task_id}),
                         headers=HEADERS, timeout=WAIT_S).json()
        return str(got["result"]["status"]["state"])

    eventually_sync(state, lambda seen: seen == "TASK_STATE_COMPLETED",
                    what=f"task {task_id} completed", within_s=WAIT_S, poll_s=0.05)


async def test_p4_a2a_resume_every_event_once_on_another_process_and_after_a_restart(
    backend: Backend, config: Path,
) -> None:
    """SQLite: resumed on the same server, then on the next one after a restart. PostgreSQL:
    resumed live on another process of the cluster, then on it after the first one stopped."""
    cluster = backend.name == "postgres"
    server = serve(backend.url, config)
    other = serve(backend.url, config) if cluster else server
    try:
        task_id, first = start(server.url)
        origin = first[0][0]  # the task is placed where its stream starts
        assert origin is not None
        assert [i is not None for i, _ in first] == [True, True]
        # Resumed while the run goes on: the rest, live, each event once.
        rest = resume(other.url, task_id, str(first[-1][0]))
        assert final_state(rest) == "TASK_STATE_COMPLETED"
        whole = resume(server.url, task_id, origin)  # the reference: the task from its start
        assert journal_ids(first) + journal_ids(rest) == journal_ids(whole)
        kinds = [next(iter(event)) for _, event in whole[1:]]
        assert kinds.count("artifactUpdate") == 1  # the answer, whole, once (no deltas here)
        assert "one two three four" in json.dumps(whole)

        # The a2a-sdk client resumes from the position in the event's metadata.
        async with a2a(f"{other.url}/a2a/worker", "tok-a", binding="HTTP+JSON",
                       streaming=True) as alice:
            cursor = int(first[1][1]["statusUpdate"]["metadata"]["tidings"]["seq"])
            resumed: list[StreamResponse] = [e async for e in alice.subscribe(
                SubscribeToTaskRequest(id=task_id),
                context=ClientCallContext(service_parameters={"Last-Event-ID": str(cursor)}))]
            assert resumed[0].task.id == task_id
            sdk_ids = [str(int(e.status_update.metadata["tidings"]["seq"]))
                       if e.HasField("status_update")
                       else str(int(e.artifact_update.metadata["tidings"]["seq"]))
                       for e in resumed[1:]]
            assert sdk_ids == journal_ids(rest)
            assert resumed[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED

        # The docs' example, as written: the a2a-sdk client drops a stream and resumes it.
        text = (Path(__file__).parents[2] / "docs" / "a2a.md").read_text("utf-8")
        code = re.findall(r"```python\n(.*?)```", text.split("## Resuming a stream")[1], re.S)[0]
        code = code.replace('"http://127.0.0.1:8080", "secret-a"', f'"{other.url}", "tok-a"')
        ran = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", code],
                                      capture_output=True, text=True, timeout=WAIT_S,
                                      check=False)
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.strip() == "TASK_STATE_COMPLETED"

        # A stream dropped on a server that then stops resumes on the next one (SQLite: the
        # same server restarted; PostgreSQL: the other process), missing nothing meanwhile.
        task_id, first = start(server.url)
        wait_completed(server.url, task_id)
        assert server.stop() == 0
        if not cluster:
            server = other = serve(backend.url, config)
        rest = resume(other.url, task_id, str(first[-1][0]))
        assert final_state(rest) == "TASK_STATE_COMPLETED"
        whole = resume(other.url, task_id, str(first[0][0]))
        assert journal_ids(first) + journal_ids(rest) == journal_ids(whole)
        assert resume(other.url, task_id, str(whole[-1][0]))[1:] == []  # nothing after the end
        async with a2a(f"{other.url}/a2a/worker", "tok-a") as alice:
            done = await alice.get_task(GetTaskRequest(id=task_id))
            assert done.status.state == TaskState.TASK_STATE_COMPLETED
    finally:
        server.kill()
        other.kill()
