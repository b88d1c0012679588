"""U2 from a shell: ``tidings approvals`` lists a held call with the commands that decide it,
``tidings approve`` lets it run, and a contradicting ``tidings deny`` is refused in one line --
docs/cli.md's commands run as written against a real ``tidings serve``, on both backends."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from tests.conftest import Backend
from tests.service.documented import arguments, cli_section
from tests.service.test_cli import WAIT_S, scripted, served, tidings
from tests.service.test_u2_chat_approvals import CAREFUL, RULES, TOKEN
from tests.waiting import eventually
from tidings.client import Client


async def test_u2_the_documented_approve_and_deny_commands_decide_as_documented(
    backend: Backend, tmp_path: Path
) -> None:
    commands, printed = cli_section("Held calls from a shell")
    with served(backend.url, "--token", f"alice={TOKEN}", "--model",
                scripted(tmp_path, RULES)) as server:
        async with Client(server.url, TOKEN) as client:
            conversation = (await client.create(json.loads(CAREFUL))).conversation_id
            held = await client.post(conversation, "greet the world", wait=WAIT_S)
            assert held.status == "awaiting_approval"
            assert held.run is not None
            [pending] = await client.approvals.list(conversation, status="pending")
            written = {"http://localhost:8080": server.url, "secret-a": TOKEN,
                       "conv_…": conversation, "appr_…": pending.approval_id}
            shown: list[str] = []
            for line in commands:
                command = arguments(line, written)
                if command[0] == "deny":  # a moment after the approval: the call has run
                    await eventually(lambda: client.approvals.list(conversation),
                                     lambda found: found[0].status == "applied",
                                     what="the approved call run")
                done = await asyncio.to_thread(tidings, *command)
                assert done.returncode == (1 if command[0] == "deny" else 0), done.stderr
                shown += (done.stdout + done.stderr).splitlines()
            answered = await client.runs.get(conversation, held.run.run_id)
            assert answered.status == "completed"
            said = [m.content for m in (await client.transcript(conversation)).items]
            assert said[-1] == "Done with the shell."
            assert "hello, world" in said[-2]
    text = "\n".join(shown).replace(conversation, "conv_…").replace(
        pending.approval_id, "appr_…").replace(held.run.run_id, "run_…")
    assert text.splitlines() == printed
