"""L1 through the command line: ``tidings post`` to a server started ``--locked`` is refused
with ``runtime_locked`` in one line and writes nothing; once an operator unlocks the server,
the same command is accepted."""

from __future__ import annotations

import asyncio

import httpx

from tests.conftest import Backend
from tests.scenarios.test_locked import database_rows
from tests.service.test_cli import WAIT_S, assert_one_line_error, served, tidings
from tidings.models.scripted import ScriptedModel
from tidings.records.results import MasterKey
from tidings.runtime.root import Runtime
from tidings.types import Profile


async def _conversation(url: str) -> str:
    async with Runtime.open(url, models=[ScriptedModel()]) as setup:
        return (await setup.create_conversation("alice", Profile(model="scripted"))
                ).conversation_id


def test_l1_cli_post_to_a_locked_server_is_refused_until_it_is_unlocked(
    backend: Backend,
) -> None:
    conv = asyncio.run(_conversation(backend.url))
    with served(backend.url, "--locked", "--token", "alice=tok-a",
                "--operator-token", "op-1") as server:
        health = httpx.get(f"{server.url}/health", timeout=WAIT_S).json()
        assert health["status"] == "locked"
        before = database_rows(backend.url)
        refused = tidings("post", "--url", server.url, "--token", "tok-a",
                          conv, "hello")
        assert_one_line_error(refused, "runtime_locked")
        assert database_rows(backend.url) == before

        unlocked = httpx.post(f"{server.url}/v1/unlock",
                              json={"master_key": MasterKey.generate().secret.hex()},
                              headers={"Authorization": "Bearer op-1"}, timeout=WAIT_S)
        assert unlocked.status_code == 200, unlocked.text
        accepted = tidings("post", "--url", server.url, "--token", "tok-a",
                           conv, "hello")
        assert accepted.returncode == 0, accepted.stderr
        assert accepted.stdout.strip().startswith("in_")
