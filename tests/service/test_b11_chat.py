"""B11: ``tidings chat`` on a real terminal (a pseudo-terminal, Ctrl-C typed as keys), against
a real ``tidings serve`` (``--url``) and against the database itself (``--database``), on both
backends.

A person types a line and sees the answer grow as it is generated; a background task's notice
arrives later while they sit at the prompt, marked as the runtime's; Ctrl-C during a slow turn
stops it; Ctrl-C at the prompt quits with status 0; a resumed chat shows the transcript first.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx
import pytest

from tests.conftest import Backend
from tests.service.terminal import Terminal, plain
from tests.service.test_cli import ENV, WAIT_S, Served, served
from tidings.models.scripted import ScriptedModel
from tidings.records.results import MasterKey
from tidings.runtime.root import Runtime
from tidings.types import RunStatus

TOKEN = "tok-a"
STORY = "Once upon a time there was a kernel that never lost a word."
SLOW = "Let me think about this for a very long time indeed."


def rules(go: Path) -> dict[str, object]:
    """The scripted model: a story written in pieces, a build that waits for ``go`` to
    exist, and an answer that takes far longer than any test waits."""
    return {
        "rules": [
            {"when": {"text_contains": "tell me a story"},
             "reply": {"text": STORY, "chunks": 6, "chunk_delay": 0.3}},
            {"when": {"text_contains": "build it"},
             "reply": {"tool_calls": [{"name": "shell", "arguments": {
                 "command": f"while [ ! -e '{go}' ]; do sleep 0.05; done; echo built",
                 "background": True}}]}},
            {"when": {"meta_kind": "task_notification"}, "reply": {"text": "The build finished."}},
            {"when": {"tool_result": "shell"}, "reply": {"text": "Started; I will report back."}},
            {"when": {"text_contains": "think slowly"},
             "reply": {"text": SLOW, "chunks": 10, "chunk_delay": 600}},
        ],
        "default": {"echo": True},
    }


class Place:
    """Where the chat is pointed: a served database (``--url``) or the database itself."""

    def __init__(self, transport: str, database: str, rules_file: Path, env: Mapping[str, str]
                 ) -> None:
        self.transport = transport
        self.database = database
        self.rules_file = rules_file
        self.env = dict(env)
        self.server: Served | None = None

    def options(self) -> list[str]:
        if self.server is not None:
            return ["--url", self.server.url, "--token", TOKEN]
        return ["--database", self.database, "--model", f"scripted:{self.rules_file}"]

    def chat(self, *args: str) -> Terminal:
        return Terminal([sys.executable, "-m", "tidings", "chat", *self.options(), *args],
                        env={**self.env, "TERM": "xterm-256color"})

    def run_status(self, conversation: str, run_id: str) -> RunStatus:
        if self.server is not None:
            got = httpx.get(f"{self.server.url}/v1/conversations/{conversation}/runs/{run_id}",
                            headers={"Authorization": f"Bearer {TOKEN}"}, timeout=WAIT_S)
            assert got.status_code == 200, got.text
            return RunStatus(got.json()["status"])

        async def read() -> RunStatus:
            async with Runtime.open(self.database, models=[ScriptedModel()]) as rt:
                return (await rt.runs.get(run_id)).status

        return asyncio.run(read())


@pytest.fixture(params=["url", "database"])
def place(request: pytest.FixtureRequest, backend: Backend, tmp_path: Path) -> Iterator[Place]:
    go = tmp_path / "GO"
    rules_file = tmp_path / "rules.json"
    rules_file.write_text(json.dumps(rules(go)), "utf-8")
    env = {**ENV, "TIDINGS_MASTER_KEY": MasterKey.generate().secret.hex()}
    where = Place(str(request.param), backend.url, rules_file, env)
    if where.transport == "database":
        yield where
        return
    with served(backend.url, "--token", f"alice={TOKEN}", "--model", f"scripted:{rules_file}",
                env=env) as server:
        where.server = server
        yield where


def answers_seen(terminal: Terminal, first_read: int, question: str) -> list[str]:
    """The answer to ``question`` as the screen showed it after each read, read by read."""
    seen: list[str] = []
    shown = ""
    for chunk in terminal.reads[first_read:]:
        shown += chunk
        after = plain(shown).split(question, 1)
        found = re.search(r"agent> ([^\n]*)", after[1]) if len(after) == 2 else None
        if found is not None:
            seen.append(found.group(1))
    return seen


def test_b11_chat_streams_shows_notices_at_the_prompt_and_stops_on_ctrl_c(
    place: Place, tmp_path: Path
) -> None:
    terminal = place.chat("--tool", "shell")
    try:
        conversation = terminal.wait_for(r"new conversation (conv_[0-9a-f]+)").group(1)
        terminal.wait_for(r"you> ")

        # The answer appears as it is generated: several reads show it growing.
        first_read = len(terminal.reads)
        mark = terminal.mark()
        terminal.type("tell me a story\n")
        terminal.wait_for(re.escape(f"agent> {STORY}\n") + "you> ", after=mark)
        grown = [a for a in answers_seen(terminal, first_read, "tell me a story")
                 if a and a != STORY]
        assert all(STORY.startswith(partial) for partial in grown), grown
        assert len(set(grown)) >= 2, grown  # at least two partial answers before the end

        # A background task's notice arrives later, while the person is at the prompt.
        mark = terminal.mark()
        terminal.type("build it\n")
        terminal.wait_for(r"  → shell \{\"command\": ", after=mark)
        task = terminal.wait_for(r"  ← shell: started background task (bg-[0-9a-f]+)",
                                 after=mark).group(1)
        at_prompt = terminal.wait_for(r"agent> Started; I will report back\.\nyou> ",
                                      after=mark).end()
        (tmp_path / "GO").touch()  # only now may the task end
        terminal.wait_for(rf"\[runtime\] task {task} exited \(exit 0, [0-9.]+ s\): built",
                          after=at_prompt)
        terminal.wait_for(r"agent> The build finished\.\nyou> ", after=at_prompt)
        assert "you> build it" not in terminal.screen[at_prompt:]  # the runtime's, not theirs

        # Ctrl-C during a slow turn stops that run.
        mark = terminal.mark()
        terminal.type("think slowly\n")
        terminal.wait_for(r"agent> Let me", after=mark)
        terminal.ctrl_c()
        terminal.wait_for(r"\[chat\] stopping the running turn", after=mark)
        run_id = terminal.wait_for(r"\[runtime\] run (run_[0-9a-f]+) stopped\nyou> ",
                                   after=mark).group(1)
        assert SLOW not in terminal.screen  # never shown whole: it was never committed
        assert place.run_status(conversation, run_id) is RunStatus.STOPPED

        # Ctrl-C at the prompt quits, with status 0.
        terminal.ctrl_c()
        assert terminal.wait() == 0
    finally:
        terminal.close()
    assert "Traceback" not in terminal.screen

    # Resumed: the recent transcript first, then the prompt; Ctrl-D quits.
    again = place.chat(conversation)
    try:
        history = again.wait_for(rf"conversation {conversation}, \d+ messages").end()
        again.wait_for(rf"you> tell me a story\nagent> {re.escape(STORY)}\n", after=history)
        again.wait_for(rf"\[runtime\] task {task} exited", after=history)
        again.wait_for(r"you> think slowly\nyou> $", after=history)
        again.ctrl_d()
        assert again.wait() == 0
    finally:
        again.close()


def test_b11_chat_over_a_service_reconnects_its_feed_after_a_restart(tmp_path: Path) -> None:
    database = str(tmp_path / "restart.db")
    rules_file = tmp_path / "rules.json"
    rules_file.write_text(json.dumps(rules(tmp_path / "GO")), "utf-8")
    args = ("--token", f"alice={TOKEN}", "--model", f"scripted:{rules_file}")
    first = Served(database, *args).wait_ready()
    terminal: Terminal | None = None
    try:
        terminal = Terminal([sys.executable, "-m", "tidings", "chat", "--url", first.url,
                             "--token", TOKEN], env={**ENV, "TERM": "xterm-256color"})
        terminal.wait_for(r"you> ")
        terminal.type("before the restart\n")
        terminal.wait_for(r"agent> before the restart\nyou> ")
        assert first.stop() == 0
        terminal.wait_for(r"\[chat\] lost the feed")
        with served(database, *args, port=first.port):
            terminal.wait_for(r"\[chat\] the feed is back, after event \d+")
            mark = terminal.mark()
            terminal.type("tell me a story\n")
            terminal.wait_for(re.escape(f"agent> {STORY}\n") + "you> ", after=mark)
            # Resumed from the last event it had: nothing it showed is shown again.
            assert terminal.screen.count("agent> before the restart") == 1
            terminal.ctrl_c()
            assert terminal.wait() == 0
    finally:
        if terminal is not None:
            terminal.close()
        first.kill()
