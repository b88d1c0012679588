"""P1: an ``a2a-sdk`` client (the SDK's own client classes) against ``tidings serve`` in a
process of its own, on loopback, both backends: the Agent Cards; SendMessage blocking and with
returnImmediately, a second message in the same context, GetTask with a history length,
ListTasks by context and paged, CancelTask, push-notification config CRUD, another principal's
404 (JSON-RPC); streaming with working, the answer's deltas and completed, an approval asked
as input-required and decided by the next message, SubscribeToTask (HTTP+JSON); bad input."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing, asynccontextmanager
from pathlib import Path

import httpx
import pytest
from a2a.client import Client, ClientConfig, create_client
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import TaskNotFoundError

from tests.conftest import Backend
from tests.service.test_cli import WAIT_S, Served

CONFIG = """
[models.echo]
provider = "scripted"

[[models.echo.rules]]
when = { text_contains = "slow" }
reply = { text = "late", delay_seconds = 60 }

[[models.echo.rules]]
when = { text_contains = "stream" }
reply = { text = "one two three four five", chunks = 5, chunk_delay = 0.05 }

[[models.echo.rules]]
when = { text_contains = "list files" }
reply = { tool_calls = [{ name = "shell", arguments = { command = "echo hi" } }] }

[[models.echo.rules]]
when = { tool_result = "shell" }
reply = { text = "Listed." }

[profiles.helper]
model = "echo"

[profiles.careful]
model = "echo"
tools = ["shell"]
approval_mode = "always"
"""


@pytest.fixture
def server(backend: Backend, tmp_path: Path) -> Iterator[Served]:
    config = tmp_path / "tidings.toml"
    config.write_text(CONFIG, "utf-8")
    served = Served(backend.url, "--config", str(config), "--token", "alice=tok-a",
                    "--token", "bob=tok-b", "--allow-private-webhooks")
    try:
        yield served.wait_ready()
    finally:
        served.kill()


@asynccontextmanager
async def a2a(url: str, token: str, *, binding: str = "JSONRPC",
              streaming: bool = False) -> AsyncIterator[Client]:
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                                 timeout=WAIT_S) as http:
        client = await create_client(url, ClientConfig(
            httpx_client=http, streaming=streaming, supported_protocol_bindings=[binding]))
        yield client


def said(text: str, *, context_id: str = "", task_id: str = "",
         return_immediately: bool = False) -> SendMessageRequest:
    return SendMessageRequest(
        message=Message(message_id=f"m-{text.replace(' ', '-')}", role=Role.ROLE_USER,
                        parts=[Part(text=text)], context_id=context_id, task_id=task_id),
        configuration=SendMessageConfiguration(return_immediately=return_immediately))


async def one_task(client: Client, request: SendMessageRequest) -> Task:
    events = [event async for event in client.send_message(request)]
    assert len(events) == 1, events
    assert events[0].HasField("task"), events
    task: Task = events[0].task
    return task


def answer(task: Task) -> str:
    assert [a.name for a in task.artifacts] == ["answer"], task
    return str(task.artifacts[0].parts[0].text)


async def test_p1_a2a_json_rpc_send_get_list_cancel_push_configs_and_isolation(
    server: Served,
) -> None:
    # The Agent Cards: public, one per profile, the first at the well-known path.
    async with httpx.AsyncClient(base_url=server.url, timeout=WAIT_S) as http:
        first = (await http.get("/.well-known/agent-card.json")).json()
        careful = (await http.get("/a2a/careful/.well-known/agent-card.json")).json()
        assert (await http.get("/a2a/nobody/.well-known/agent-card.json")).status_code == 404
        assert (await http.post("/a2a/helper", json={})).status_code == 401
    assert first["name"] == "helper"
    assert careful["name"] == "careful"
    assert [s["id"] for s in careful["skills"]] == ["shell"]
    assert {i["protocolBinding"] for i in first["supportedInterfaces"]} == {"JSONRPC",
                                                                            "HTTP+JSON"}
    assert first["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
    # Push notifications are delivered (P3): the card claims them.
    assert first["capabilities"] == {"streaming": True, "pushNotifications": True}

    async with a2a(server.url, "tok-a") as alice, a2a(server.url, "tok-b") as bob:
        # A message without a context opens one; blocking, it answers once the run ended.
        hello = await one_task(alice, said("hello"))
        assert hello.status.state == TaskState.TASK_STATE_COMPLETED
        assert answer(hello) == "hello"
        assert [m.role for m in hello.history] == [Role.ROLE_USER, Role.ROLE_AGENT]
        assert hello.history[0].message_id == "m-hello"
        # The same context again: the conversation goes on.
        again = await one_task(alice, said("again", context_id=hello.context_id))
        assert (again.context_id, answer(again)) == (hello.context_id, "again")
        got = await alice.get_task(GetTaskRequest(id=hello.id, history_length=1))
        assert [m.parts[0].text for m in got.history] == ["hello"]  # the last one: the answer
        # returnImmediately: the task as it stands; CancelTask stops its run.
        slow = await one_task(alice, said("slow", context_id=hello.context_id,
                                          return_immediately=True))
        assert slow.status.state in (TaskState.TASK_STATE_SUBMITTED,
                                     TaskState.TASK_STATE_WORKING)
        cancelled = await alice.cancel_task(CancelTaskRequest(id=slow.id))
        assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
        # ListTasks by context, newest first, paged.
        page = await alice.list_tasks(ListTasksRequest(context_id=hello.context_id,
                                                       page_size=2))
        assert [t.id for t in page.tasks] == [slow.id, again.id]
        assert page.total_size == 3
        assert page.next_page_token
        rest = await alice.list_tasks(ListTasksRequest(context_id=hello.context_id,
                                                       page_token=page.next_page_token))
        assert [t.id for t in rest.tasks] == [hello.id]
        assert not rest.next_page_token

        # Push-notification configs: created, read, listed, deleted -- per principal.
        config = TaskPushNotificationConfig(task_id=hello.id, id="hook",
                                            url="http://127.0.0.1:9/hook", token="t")
        made = await alice.create_task_push_notification_config(config)
        assert (made.id, made.url) == ("hook", "http://127.0.0.1:9/hook")
        listed = await alice.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=hello.id))
        assert [c.id for c in listed.configs] == ["hook"]
        one = GetTaskPushNotificationConfigRequest(task_id=hello.id, id="hook")
        assert (await alice.get_task_push_notification_config(one)).token == "t"

        # Another principal: every id of alice's is unknown, alike.
        for foreign in (bob.get_task(GetTaskRequest(id=hello.id)),
                        bob.get_task_push_notification_config(one),
                        one_task(bob, said("mine?", context_id=hello.context_id)),
                        alice.get_task(GetTaskRequest(id="in_nope"))):
            with pytest.raises(TaskNotFoundError):
                await foreign
        assert not (await bob.list_tasks(ListTasksRequest(context_id=hello.context_id))).tasks

        await alice.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=hello.id, id="hook"))
        with pytest.raises(TaskNotFoundError):
            await alice.get_task_push_notification_config(one)

    # Bad input changes nothing: not UTF-8, too large, a file part.
    async with httpx.AsyncClient(base_url=server.url, timeout=WAIT_S,
                                 headers={"Authorization": "Bearer tok-a"}) as http:
        broken = await http.post("/a2a/helper", content=b'{"jsonrpc": "2.0", "id": 1, "\xff"}',
                                 headers={"content-type": "application/json"})
        assert broken.json()["error"]["code"] == -32700
        huge = await http.post("/a2a/helper", content=b"x" * 200_000)
        assert huge.status_code == 413
        filed = await http.post("/a2a/helper", headers={"A2A-Version": "1.0"}, json={
            "jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": {"message": {
                "messageId": "f", "role": "ROLE_USER", "parts": [{"url": "http://x/y"}]}}})
        assert filed.json()["error"]["code"] == -32005
    async with a2a(server.url, "tok-a") as alice:
        listed_all = await alice.list_tasks(ListTasksRequest())
        assert len(listed_all.tasks) == 3


async def test_p1_a2a_http_json_streams_deltas_approval_and_subscription(
    server: Served,
) -> None:
    careful = f"{server.url}/a2a/careful"  # this agent's card, its profile's approval mode
    async with a2a(careful, "tok-a", binding="HTTP+JSON", streaming=True) as alice:
        events: list[StreamResponse] = [
            e async for e in alice.send_message(said("stream this"))]
        kinds = [e.WhichOneof("payload") for e in events]
        assert kinds[0] == "task"
        states = [e.status_update.status.state for e in events
                  if e.HasField("status_update")]
        assert states[0] == TaskState.TASK_STATE_WORKING
        assert states[-1] == TaskState.TASK_STATE_COMPLETED
        chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
        deltas = [c.artifact.parts[0].text for c in chunks if c.append]
        assert len(deltas) >= 2
        assert "".join(deltas) == "one two three four five"
        assert chunks[-1].last_chunk
        assert chunks[-1].artifact.parts[0].text == "one two three four five"
        assert kinds.index("artifact_update") < len(kinds) - 1  # deltas before the end

        # A held tool call is input-required; the next message with the task id decides it.
        asked = [e async for e in alice.send_message(
            said("list files", context_id=events[0].task.context_id))]
        task_id = asked[0].task.id
        held = asked[-1].status_update.status
        assert held.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert "shell" in held.message.parts[0].text
        tool_calls = [e.status_update.status.message for e in asked
                      if e.HasField("status_update") and e.status_update.status.HasField(
                          "message") and e.status_update.status.state
                      == TaskState.TASK_STATE_WORKING]
        assert tool_calls
        assert all(m.role == Role.ROLE_AGENT for m in tool_calls)
        decided = [e async for e in alice.send_message(said("approve", task_id=task_id))]
        assert decided[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
        done = await alice.get_task(GetTaskRequest(id=task_id))
        assert answer(done) == "Listed."
        roles = [(m.role, m.metadata["tidings"]["role"]) for m in done.history]
        assert roles[0] == (Role.ROLE_USER, "user")
        assert (Role.ROLE_AGENT, "tool") in roles  # the tool's result, never the person's

        # SubscribeToTask follows a running task to its end (here, its cancellation).
        async with aclosing(alice.send_message(said("slow"))) as started:  # type: ignore[type-var]
            slow_id = (await anext(started)).task.id  # the task, then leave the stream
        followed: list[StreamResponse] = []
        subscribed = asyncio.Event()

        async def follow() -> None:
            async for event in alice.subscribe(SubscribeToTaskRequest(id=slow_id)):
                followed.append(event)
                subscribed.set()

        following = asyncio.create_task(follow())
        async with asyncio.timeout(WAIT_S):
            await subscribed.wait()
        await alice.cancel_task(CancelTaskRequest(id=slow_id))
        async with asyncio.timeout(WAIT_S):
            await following
        assert followed[0].task.id == slow_id
        assert followed[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED


def test_p1_a2a_docs_example_runs_as_written(server: Served) -> None:
    text = (Path(__file__).parents[2] / "docs" / "a2a.md").read_text("utf-8")
    code = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    code = code.replace('"http://127.0.0.1:8080", "secret-a"', f'"{server.url}", "tok-a"')
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=WAIT_S, check=False)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "TASK_STATE_COMPLETED hello"
