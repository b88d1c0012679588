"""B15 and B14 in ``tidings chat`` on a real terminal, against a real ``tidings serve`` whose
MCP servers ask (the booking desk) and report progress (bulky), on both backends: the desk's
question is shown with its form while the turn waits on it; an answer off the schema is refused
with the service's words and changes nothing; a line typed then is the answer (not a message),
and the tool's result is that answer; ``/decline`` declines the next one; a call's progress
lines appear while it runs."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import Backend
from tests.service.asking import BOOKED, COUNTED, PROFILE, TOKEN, config
from tests.service.terminal import Terminal
from tests.service.test_cli import ENV, WAIT_S, Served, served

CLI_DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def documented() -> list[str]:
    """The chat's questions as docs/cli.md shows them (its block under **Questions.**)."""
    section = CLI_DOC.read_text("utf-8").split("**Questions.**", 1)[1]
    found = re.search(r"```\n(.*?)```", section, re.S)
    assert found is not None
    return found.group(1).splitlines()


def assert_in_order(lines: list[str], screen: str) -> None:
    """Each of ``lines`` is a line of ``screen``, in this order."""
    shown = [line.rstrip() for line in screen.splitlines()]
    at = 0
    for line in lines:
        assert line in shown[at:], (line, shown[at:])
        at = shown.index(line, at) + 1


@pytest.fixture
def server(backend: Backend, tmp_path: Path) -> Iterator[Served]:
    with served(backend.url, "--token", f"alice={TOKEN}", *config(tmp_path)) as live:
        yield live


def test_b15_b14_chat_shows_a_question_takes_its_answer_and_shows_progress(
    server: Served,
) -> None:
    terminal = Terminal([sys.executable, "-m", "tidings", "chat", "--url", server.url,
                         "--token", TOKEN, "--profile", json.dumps(PROFILE)],
                        env={**ENV, "TERM": "xterm-256color"})
    try:
        found = terminal.wait_for(r"new conversation (conv_\w+)")
        conversation = found.group(1)
        terminal.wait_for("you> ", after=found.end())
        mark = terminal.mark()
        terminal.type("book it\n")
        asked = terminal.wait_for(r"\[runtime\] question (qst_\w+): mcp:desk asks: How many "
                                  r"seats on May 3\?", after=mark)
        qid = asked.group(1)
        hint = terminal.wait_for(r"seats \(integer ≥ 1, required\)\n.*answer with /answer "
                                 "seats=…, or /decline, /cancel", after=asked.end())
        terminal.wait_for("you> ", after=hint.end())

        mark = terminal.mark()
        terminal.type("/answer seats=0\n")
        refused = terminal.wait_for(
            r"\[chat\] not answered: invalid_input: the answer does not fit the question's "
            r"schema: seats: 0 is less than the minimum of 1\n.*\n", after=mark)
        terminal.wait_for("you> ", after=refused.end())
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"},
                          timeout=WAIT_S) as client:
            questions = client.get(f"/v1/conversations/{conversation}/questions").json()
            assert [q["status"] for q in questions["questions"]] == ["pending"]

            mark = terminal.mark()
            terminal.type("2\n")  # words without a command: neither an answer nor a message
            held = terminal.wait_for(r"\[chat\] not sent: a question waits", after=mark)
            terminal.wait_for("you> ", after=held.end())
            assert [q["status"] for q in client.get(
                f"/v1/conversations/{conversation}/questions").json()["questions"]] == [
                "pending"]
            mark = terminal.mark()
            terminal.type("/answer 2\n")  # the form has one field: the value alone answers it
            terminal.wait_for(rf"\[runtime\] question {qid} accepted by alice", after=mark)
            terminal.wait_for(r"← desk\.book: booked 2 seats on May 3", after=mark)
            terminal.wait_for(f"agent> {re.escape(BOOKED)}", after=mark)
            shown = terminal.screen.replace(conversation, "conv_…").replace(qid, "qst_…")
            assert_in_order(documented(), shown)
            transcript = client.get(f"/v1/conversations/{conversation}/transcript").json()
            said = [m["content"] for m in transcript["items"] if m["role"] == "user"]
            assert said == ["book it"]  # "2" was no message

            mark = terminal.mark()
            terminal.type("book it\n")
            terminal.wait_for("How many seats on May 3", after=mark)
            terminal.type("/decline\n")
            terminal.wait_for(r"question \S+ declined by alice", after=mark)
            terminal.wait_for(r"← desk\.book: not done: the person chose decline", after=mark)
            terminal.wait_for(f"agent> {re.escape(BOOKED)}", after=mark)

            mark = terminal.mark()
            terminal.type("count it\n")
            progress = terminal.wait_for(r"… bulky\.steps: (\d\.\d+)/1\.2 — step 1\n",
                                         after=mark)
            assert 0 < float(progress.group(1)) <= 1.2
            terminal.wait_for(r"← bulky\.steps: done after", after=progress.end())
            terminal.wait_for(f"agent> {COUNTED}", after=mark)
            statuses = [q["status"] for q in client.get(
                f"/v1/conversations/{conversation}/questions").json()["questions"]]
            assert statuses == ["declined", "accepted"]
        terminal.ctrl_d()
        assert terminal.wait() == 0
    finally:
        terminal.close()
