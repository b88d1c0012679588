"""B15 and B14 from the command line, against a real ``tidings serve`` whose MCP servers are
declared in its config file, on both backends: ``tidings questions`` lists what the booking
desk asked (who, what, the form's fields, the command that answers it); ``tidings answer``
refuses an answer off the schema in one line that says where, changing nothing, then answers it
once -- the tool's result is the person's answer; ``tidings watch`` shows the question, its
answer and a call's progress."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Backend
from tests.service.asking import PROFILE, TOKEN, config
from tests.service.test_cli import (
    ENV,
    WAIT_S,
    Lines,
    Served,
    assert_one_line_error,
    served,
    tidings,
)
from tests.waiting import eventually_sync


@pytest.fixture
def server(backend: Backend, tmp_path: Path) -> Iterator[Served]:
    with served(backend.url, "--token", f"alice={TOKEN}", *config(tmp_path)) as live:
        yield live


def api(server: Served) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"},
                        timeout=WAIT_S)


def start(server: Served, text: str) -> str:
    """A new conversation that may call the desk and bulky; ``text`` posted to it."""
    with api(server) as client:
        created = client.post("/v1/conversations", json={"profile": PROFILE})
        assert created.status_code == 201, created.text
        conversation = str(created.json()["conversation_id"])
        posted = client.post(f"/v1/conversations/{conversation}/inputs", json={"content": text})
        assert posted.status_code == 202, posted.text
    return conversation


def until(server: Served, path: str, found: Any) -> Any:
    """GET ``path`` until ``found(body)`` is truthy; that value."""
    with api(server) as client:
        body = eventually_sync(lambda: client.get(path).json(), found, what=f"GET {path} found",
                               within_s=WAIT_S, poll_s=0.05)
    return found(body)


def client_args(server: Served) -> list[str]:
    return ["--url", server.url, "--token", TOKEN]


def test_b15_cli_lists_a_question_refuses_an_answer_off_its_schema_and_answers_it_once(
    server: Served,
) -> None:
    conversation = start(server, "book it")
    question = until(server, f"/v1/conversations/{conversation}/questions?status=pending",
                     lambda body: body["questions"] and body["questions"][0])
    qid = question["question_id"]

    listed = tidings("questions", *client_args(server), conversation, "--status", "pending")
    assert listed.returncode == 0, listed.stderr
    assert f"{qid} pending" in listed.stdout
    assert "mcp:desk asks: How many seats on May 3?" in listed.stdout
    assert "seats (integer ≥ 1, required)" in listed.stdout
    assert f"tidings answer {conversation} {qid} --field seats=…" in listed.stdout

    # Off the schema: one line that says where, and nothing answered.
    refused = tidings("answer", *client_args(server), conversation, qid, "--field", "seats=0")
    assert_one_line_error(refused, "invalid_input")
    assert "seats: 0 is less than the minimum of 1" in refused.stderr
    no_field = tidings("answer", *client_args(server), conversation, qid, "--field", "seat=2")
    assert no_field.returncode == 2
    assert "no field 'seat' (its fields: seats)" in no_field.stderr
    with api(server) as client:
        still = client.get(f"/v1/conversations/{conversation}/questions").json()["questions"]
        assert [(q["question_id"], q["status"]) for q in still] == [(qid, "pending")]

    answered = tidings("answer", *client_args(server), conversation, qid, "--field", "seats=2")
    assert answered.returncode == 0, answered.stderr
    assert f'{qid} accepted by alice: {{"seats": 2}}' in answered.stdout
    result = until(server, f"/v1/conversations/{conversation}/transcript", lambda body: [
        m["content"] for m in body["items"] if m["role"] == "tool"])
    assert result == ["booked 2 seats on May 3"]

    # Once: a contradicting answer is refused.
    again = tidings("answer", *client_args(server), conversation, qid, "--decline")
    assert_one_line_error(again, f"question_decided: question '{qid}' is already accepted")
    unknown = tidings("answer", *client_args(server), conversation, "qst_nope", "--cancel")
    assert_one_line_error(unknown, "unknown_question")


def test_b15_b14_watch_shows_the_question_its_answer_and_a_calls_progress(
    server: Served,
) -> None:
    conversation = start(server, "book it")
    qid = until(server, f"/v1/conversations/{conversation}/questions?status=pending",
                lambda body: body["questions"] and body["questions"][0]["question_id"])
    watch = subprocess.Popen(
        [sys.executable, "-m", "tidings", "watch", *client_args(server), conversation],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=ENV)
    assert watch.stdout is not None
    lines = Lines(watch.stdout)
    try:
        asked = lines.wait_for(r"question_asked question (\S+): (.*)")
        assert asked.group(1) == qid
        assert asked.group(2).startswith(
            "mcp:desk asks: How many seats on May 3? [seats (integer ≥ 1, required)] -- "
            f"answer: tidings answer {conversation} {qid} --field seats=…")
        with api(server) as client:
            client.post(f"/v1/conversations/{conversation}/questions/{qid}/answer",
                        json={"action": "decline"}).raise_for_status()
        lines.wait_for(rf"question_answered question {qid} declined by alice")
        lines.wait_for("tool message .*: not done: the person chose decline")

        with api(server) as client:
            client.post(f"/v1/conversations/{conversation}/inputs",
                        json={"content": "count it"}).raise_for_status()
        progress = lines.wait_for(r"mcp_progress bulky\.steps: ([\d.]+)/1\.2 — step (\d)")
        assert 0 < float(progress.group(1)) <= 1.2
        lines.wait_for("tool message .*: done after")
    finally:
        watch.kill()
        watch.wait(WAIT_S)


CLI_DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_b15_the_documented_commands_answer_as_documented(server: Served) -> None:
    """docs/cli.md's commands for questions, run as written (on this server, its token, the
    conversation and the question of the moment), print what the page shows."""
    section = CLI_DOC.read_text("utf-8").split("## Questions from MCP servers\n", 1)[1]
    commands, printed = re.findall(r"```(?:sh)?\n(.*?)```", section, re.S)[:2]
    conversation = start(server, "book it")
    qid = until(server, f"/v1/conversations/{conversation}/questions?status=pending",
                lambda body: body["questions"] and body["questions"][0]["question_id"])
    written = {"http://localhost:8080": server.url, "secret-a": TOKEN,
               "conv_…": conversation, "qst_…": qid}
    shown: list[str] = []
    for line in commands.splitlines():
        program, *arguments = [written.get(a, a) for a in shlex.split(line)]
        assert program == "tidings"
        done = tidings(*arguments)
        shown += (done.stdout + done.stderr).splitlines()
    said = "\n".join(shown).replace(conversation, "conv_…").replace(qid, "qst_…")
    assert said.splitlines() == printed.splitlines()
