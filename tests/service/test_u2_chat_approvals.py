"""U2: ``tidings chat`` on a real terminal shows a tool call held for the person's approval and
asks y/n in place -- y runs it, n refuses it -- and never posts the decision, nor words typed
meanwhile, as a message; against a real ``tidings serve`` (``--url``) and the database itself
(``--database``), on both backends."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Backend
from tests.service.terminal import Terminal
from tests.service.test_b15_chat_questions import CLI_DOC, assert_in_order
from tests.service.test_cli import ENV, WAIT_S, scripted, served, tidings
from tidings.client import Client

TOKEN = "tok-alice"
RULES = {
    "rules": [
        {"when": {"text_contains": "greet the world"},
         "reply": {"tool_calls": [{"name": "shell", "arguments": {
             "command": "echo hello, world"}}]}},
        {"when": {"tool_result": "shell"}, "reply": {"text": "Done with the shell."}},
    ],
    "default": {"echo": True},
}
ASKED = r"approve shell\? \[y/n\] "
CAREFUL = json.dumps({"model": "scripted", "tools": ["shell"], "approval_mode": "always"})


@pytest.fixture(params=["url", "database"])
def where(request: pytest.FixtureRequest, backend: Backend, tmp_path: Path
          ) -> Iterator[list[str]]:
    """The chat's options: a served database, or the database itself."""
    model = scripted(tmp_path, RULES)
    if request.param == "database":
        yield ["--database", backend.url, "--model", model, "--owner", "alice"]
        return
    with served(backend.url, "--token", f"alice={TOKEN}", "--model", model) as server:
        yield ["--url", server.url, "--token", TOKEN]


def documented() -> list[str]:
    """The chat's held call as docs/cli.md shows it (its block under **Held calls.**)."""
    section = CLI_DOC.read_text("utf-8").split("**Held calls.**", 1)[1]
    found = re.search(r"```\n(.*?)```", section, re.S)
    assert found is not None
    return found.group(1).splitlines()


def said_by_the_person(where: list[str], conversation: str) -> list[str]:
    """The person's messages in the transcript, read by the command line."""
    reach = where[:4] if where[0] == "--url" else where[:2]
    shown = tidings("transcript", "--json", *reach, conversation)
    assert shown.returncode == 0, shown.stderr
    return [m["content"] for m in json.loads(shown.stdout)["items"] if m["role"] == "user"]


def test_u2_chat_asks_y_or_n_for_a_held_call_and_posts_no_decision(where: list[str]) -> None:
    terminal = Terminal([sys.executable, "-m", "tidings", "chat", *where, "--profile", CAREFUL],
                        env={**ENV, "TERM": "xterm-256color"})
    try:
        conversation = terminal.wait_for(r"new conversation (conv_\w+)").group(1)
        terminal.wait_for("you> ")
        start = terminal.mark()
        [held, _] = terminal.type_and_see(
            "greet the world\n", r"\[runtime\] run (run_\w+) waits for a person's approval of "
            r"shell \((appr_\w+)\)\n", ASKED)
        # Neither a decision nor a message: the chat says how to decide, and sends nothing.
        terminal.type_and_see("what will it do?\n", r"\[chat\] not sent: a call waits for "
                              "your approval", ASKED)
        terminal.type_and_see("y\n", rf"\[runtime\] approval {held.group(2)} approved by alice",
                              r"agent> Done with the shell\.\nyou> ")
        shown = terminal.screen[start:].replace(conversation, "conv_…").replace(
            held.group(1), "run_…").replace(held.group(2), "appr_…")
        assert_in_order(documented(), "you> greet the world\n" + shown)

        terminal.type_and_see("greet the world\n", ASKED)
        terminal.type_and_see("n\n", r"\[runtime\] approval appr_\w+ denied by alice",
                              r"  ← shell: denied by alice: the tool was not run",
                              r"agent> Done with the shell\.\n(\S.*\n)*you> ")
        terminal.ctrl_d()
        assert terminal.wait() == 0
    finally:
        terminal.close()
    assert "Traceback" not in terminal.screen
    assert said_by_the_person(where, conversation) == ["greet the world", "greet the world"]


async def test_u2_chat_shows_a_call_held_before_it_started_and_decides_it(
    backend: Backend, tmp_path: Path
) -> None:
    """Resumed while a call waits: the chat shows it first and takes /approve."""
    with served(backend.url, "--token", f"alice={TOKEN}", "--model",
                scripted(tmp_path, RULES)) as server:
        async with Client(server.url, TOKEN) as client:
            made = await client.create(json.loads(CAREFUL))
            conversation = made.conversation_id
            held = await client.post(conversation, "greet the world", wait=WAIT_S)
            assert held.status == "awaiting_approval"
        terminal = Terminal([sys.executable, "-m", "tidings", "chat", "--url", server.url,
                             "--token", TOKEN, conversation],
                            env={**ENV, "TERM": "xterm-256color"})
        try:
            shown = terminal.wait_for(r'    shell \{"command": "echo hello, world"\}\n')
            terminal.wait_for(ASKED, after=shown.end())
            terminal.type_and_see("/approve\n", r"approved by alice",
                                  r"agent> Done with the shell\.\n(\S.*\n)*you> ")
            terminal.ctrl_c()
            assert terminal.wait() == 0
        finally:
            terminal.close()
        async with Client(server.url, TOKEN) as client:
            [decided] = await client.approvals.list(conversation)
            assert (decided.status, decided.decided_by) == ("applied", "alice")
