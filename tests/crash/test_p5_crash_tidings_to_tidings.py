"""P5, tidings to tidings: one ``tidings serve`` (the remote: its profile ``helper`` served over
A2A, its model working ~1.5 s on a brief) is the remote child of another tidings runtime, and
each side is SIGKILLed in turn while the remote works.

- The parent tidings is killed (after the remote task's id was stored); a runtime started on
  its database follows the same remote task, relays the answer once, and the remote received
  the brief once.
- The remote ``tidings serve`` is killed; started again on its database (same port), it still
  knows the task -- its A2A tasks are its inputs and runs, in its database -- and the turn the
  kill cut off is recovered by its runtime (the run ends failed, ``interrupted``, and a new run
  takes the same input in the same unit, so the task never reads as failed). The parent, which
  kept following (its stream dropped: it asked again, then subscribed again), gets that answer
  once. ``lost`` would be the answer only for a remote that forgot the task; a tidings remote
  does not.

tidings' A2A server opens its own contexts, so the brief goes without the context chosen for it
(recorded first). Both sides run on the test's backend (the remote in a database of its own).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import Backend, drop_postgres_database, fresh_postgres_database
from tests.crash.helpers import spawn_script, wait_instance_released
from tests.service.test_cli import Served
from tests.waiting import eventually
from tidings import Profile, RemoteAgent, Rule, Runtime, ScriptedModel
from tidings.types import Message

CHILD = Path(__file__).with_name("remote_child.py")
WAIT = 20.0
TOKEN_ENV = "P5_TIDINGS_REMOTE_TOKEN"
TOKEN = "tok-remote"
CONFIG = """
[models.worker]
provider = "scripted"

[[models.worker.rules]]
when = { text_contains = "slow work" }
reply = { text = "done slowly", delay_seconds = 1.5 }

[profiles.helper]
model = "worker"
"""


@pytest.fixture
def remote_database(request: pytest.FixtureRequest, backend: Backend,
                    tmp_path: Path) -> Iterator[str]:
    """A database of its own for the remote ``tidings serve``, on the test's backend."""
    if backend.name == "sqlite":
        yield f"sqlite:///{tmp_path / 'remote.db'}"
        return
    admin: str = request.getfixturevalue("postgres_template")
    url = fresh_postgres_database(admin)
    try:
        yield url
    finally:
        drop_postgres_database(admin, url)


def serve(database: str, config: Path, port: int | None = None) -> Served:
    return Served(database, "--config", str(config), "--token", f"alice={TOKEN}",
                  port=port).wait_ready()


@contextlib.contextmanager
def remote(database: str, tmp_path: Path) -> Iterator[tuple[Served, RemoteAgent, Path]]:
    config = tmp_path / "remote.toml"
    config.write_text(CONFIG, "utf-8")
    server = serve(database, config)
    try:
        yield server, RemoteAgent("helper", server.url, token_env=TOKEN_ENV), config
    finally:
        server.kill()


def briefs(url: str) -> list[str]:
    """What the remote was asked: the person inputs of alice's conversations there."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    pages = httpx.get(f"{url}/v1/conversations", headers=headers, timeout=WAIT).json()
    said: list[str] = []
    for conversation in pages["items"]:
        inputs = httpx.get(f"{url}/v1/conversations/{conversation['conversation_id']}/inputs",
                           headers=headers, timeout=WAIT).json()["items"]
        said += [i["content"] for i in inputs if i["origin"] == "person"]
    return said


def remote_runs(url: str) -> list[tuple[str, str | None]]:
    """The remote's runs, every conversation's: (status, failure code)."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    listed = httpx.get(f"{url}/v1/conversations", headers=headers, timeout=WAIT).json()
    return [(r["status"], r["failure_code"]) for c in listed["items"]
            for r in httpx.get(f"{url}/v1/conversations/{c['conversation_id']}/runs",
                               headers=headers, timeout=WAIT).json()["items"]]


async def answered(rt: Runtime, conv: str) -> list[Message]:
    async def transcript() -> list[Message]:
        await rt.settle(conv)
        return await rt.transcript(conv)
    await eventually(transcript, lambda ms: bool(ms) and ms[-1].content == "Read.",
                     what="the parent's turn on the answer", within_s=WAIT)
    await asyncio.sleep(0.3)  # a second relay, were there one, would show by now
    return await rt.transcript(conv)


def relayed_once(messages: list[Message]) -> str:
    [mail] = [m for m in messages if "<task_result" in m.content]
    assert mail.content.count("<task_result") == 1
    return mail.content


async def test_p5_tidings_to_tidings_the_parent_killed_while_the_remote_works(
    backend: Backend, remote_database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    with remote(remote_database, tmp_path) as (server, agent, _):
        declared = json.dumps({"name": agent.name, "url": agent.url, "token_env": TOKEN_ENV})
        async with spawn_script(CHILD, backend.url, declared) as child:
            left = await child.checkpoint("sent", within_s=WAIT)
            await child.kill()  # SIGKILL while the remote task works
        await wait_instance_released(backend.url, left["instance_id"])
        conv = left["conversation_id"]
        model = ScriptedModel(rules=[Rule({"text_contains": "done slowly"}, {"text": "Read."})],
                              default={"text": "ok"})
        async with Runtime.open(backend.url, models=[model], agents=[agent]) as rt:
            messages = await answered(rt, conv)
            [request] = await rt.children.list(conv)
        said = briefs(server.url)
    assert said == ["slow work"]  # the brief was sent once
    assert 'status="completed"' in relayed_once(messages)
    assert (request.reply_status, request.reply, request.relayed) == (
        "completed", "done slowly", True)


async def test_p5_tidings_to_tidings_the_remote_killed_while_it_works(
    backend: Backend, remote_database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    model = ScriptedModel(rules=[
        Rule({"text_equals": "go"}, {"tool_calls": [{"name": "spawn", "arguments": {
            "agent": "helper", "brief": "slow work"}}]}),
        Rule({"tool_result": "spawn"}, {"text": "Delegated."}),
        Rule({"text_contains": "done slowly"}, {"text": "Read."}),
    ], default={"text": "ok"})
    with remote(remote_database, tmp_path) as (server, agent, config):
        async with Runtime.open(backend.url, models=[model], agents=[agent]) as rt:
            conv = (await rt.create_conversation("alice", Profile(
                model="scripted", tools=("spawn",)))).conversation_id
            await rt.post(conv, "go")

            async def working() -> list[str]:
                return briefs(server.url)
            await eventually(working, bool, what="the brief at the remote", within_s=WAIT)
            server.kill()  # SIGKILL while its turn works on the brief
            server = serve(remote_database, config, port=server.port)
            try:
                messages = await answered(rt, conv)
                [request] = await rt.children.list(conv)
                said = briefs(server.url)
                runs = remote_runs(server.url)
            finally:
                server.kill()
    assert said == ["slow work"]
    # the kill cut the remote's turn off; its restart took the same input again, same task
    assert runs == [("failed", "interrupted"), ("completed", None)]
    assert 'status="completed"' in relayed_once(messages)
    assert (request.reply_status, request.reply, request.relayed) == (
        "completed", "done slowly", True)
