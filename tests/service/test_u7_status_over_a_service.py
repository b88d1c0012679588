"""U7: ``tidings status`` and ``tidings dead-letters`` read a service as well as a database --
docs/cli.md's commands run as written against a real ``tidings serve`` running a background
task, on both backends: the database and the service show the same task and instance; a
principal's token sees its own conversation, and is told the instances are an operator's."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import Backend
from tests.service.documented import arguments, cli_section
from tests.service.test_cli import WAIT_S, assert_one_line_error, scripted, served, tidings
from tests.waiting import eventually
from tidings.client import Client
from tidings.records.results import MasterKey

TOKEN = "tok-alice"
OPERATOR = "operator-secret"
RULES = {"rules": [{"when": {"text_contains": "start"}, "reply": {"tool_calls": [
    {"name": "shell", "arguments": {"command": "sleep 120", "background": True}}]}}],
    "default": {"text": "Started."}}


async def test_u7_status_and_dead_letters_read_a_service_as_documented(
    backend: Backend, tmp_path: Path
) -> None:
    commands, _ = cli_section("Status and dead letters")
    env = {"TIDINGS_MASTER_KEY": MasterKey.generate().secret.hex()}
    with served(backend.url, "--token", f"alice={TOKEN}", "--operator-token", OPERATOR,
                "--model", scripted(tmp_path, RULES), env=env) as server:
        async with Client(server.url, TOKEN) as client:
            conversation = (await client.create({"model": "scripted", "tools": ["shell"]})
                            ).conversation_id
            await client.post(conversation, "start", wait=WAIT_S)
            tasks = await eventually(lambda: client.tasks.list(conversation),
                                     lambda page: page.items and page.items[0].state == "running",
                                     what="the task running")
            task = tasks.items[0].task_key
        written = {"tidings.db": backend.url, "http://localhost:8080": server.url}
        said: list[str] = []
        for line in commands:
            done = tidings(*arguments(line, written))
            assert done.returncode == 0, done.stderr
            said.append(done.stdout)
        by_database, by_service, webhooks = said
        for shown in (by_database, by_service):
            assert re.search(rf"{conversation} +│ {task} +│ running +│ .* │ sleep 120", shown)
            assert re.search(r"inst_\w+ +│ live", shown)
        assert "webhook dead letters (0)" in webhooks

        own = tidings("status", "--url", server.url, "--token", TOKEN)
        assert own.returncode == 0, own.stderr
        assert task in own.stdout
        assert "an operator's token shows them" in own.stdout
        assert_one_line_error(tidings("dead-letters", "--url", server.url, "--token", TOKEN),
                              "Error: forbidden: This route needs an operator token.")
        unreached = tidings("status", "--url", server.url)
        assert unreached.returncode == 2
        assert unreached.stderr.splitlines()[-1] == (
            "Error: give --database, or --url and --token (or $TIDINGS_TOKEN) to ask a service")
