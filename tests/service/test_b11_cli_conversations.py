"""B11: ``tidings create`` prints the new conversation's id, ``tidings transcript`` prints who
said what -- over a running service (``--url``) and over the database itself
(``--database``), on both backends; the two read the same messages in the same shapes."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path

import httpx

from tests.conftest import Backend
from tests.service.test_cli import ENV, WAIT_S, assert_one_line_error, served, tidings
from tests.waiting import eventually, eventually_sync
from tidings.models.scripted import Rule, ScriptedModel
from tidings.records.results import MasterKey
from tidings.runtime.root import Runtime

KEY = MasterKey.generate()
CONV_ID = r"conv_[0-9a-f]+"

BUILD_MODEL = ScriptedModel(
    rules=[
        Rule({"text_contains": "build"}, {"tool_calls": [{"name": "shell", "arguments": {
            "command": "printf 'built\\nand more\\n'", "background": True}}]}),
        Rule({"meta_kind": "task_notification"}, {"text": "The build finished."}),
        Rule({"tool_result": "shell"}, {"text": "Started; I will report back."}),
    ],
)


def created_id(*args: str) -> str:
    result = tidings("create", *args)
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(CONV_ID, result.stdout.strip()), result.stdout
    return result.stdout.strip()


async def _build(url: str, conversation: str) -> None:
    """Run the build conversation until the agent has answered its task's notice."""
    async with Runtime.open(url, models=[BUILD_MODEL], master_key=KEY) as rt:
        made = await rt.conversation(conversation)
        assert made.owner == "alice"
        assert made.title == "the build"
        assert made.profile.tools == ("shell",)
        await rt.post(conversation, "Start the build")

        async def contents() -> list[str]:
            await rt.settle(conversation)
            return [m.content for m in await rt.transcript(conversation)]

        await eventually(contents, lambda c: "The build finished." in c,
                         what="the notice answered")


def test_b11_create_and_transcript_over_the_database(backend: Backend) -> None:
    conversation = created_id("--database", backend.url, "--owner", "alice",
                              "--title", "the build", "--tool", "shell")
    asyncio.run(_build(backend.url, conversation))

    shown = tidings("transcript", "--database", backend.url, conversation)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == [
        "person> Start the build",
        '  → shell {"command": "printf \'built\\\\nand more\\\\n\'", "background": true}',
        shown.stdout.splitlines()[2],
        "agent> Started; I will report back.",
        shown.stdout.splitlines()[4],
        "agent> The build finished.",
    ]
    started = shown.stdout.splitlines()[2]
    assert re.fullmatch(r"  ← shell: started background task bg-\w+; you will be told when "
                        r"it ends", started), started
    notice = shown.stdout.splitlines()[4]
    # The runtime's words are marked as its own, never as the person's.
    assert re.fullmatch(r"\[runtime\] task bg-\w+ exited \(exit 0, \d+\.\d s\): built … "
                        r"\(\+1 lines\)", notice), notice

    as_json = tidings("transcript", "--database", backend.url, "--json", conversation)
    assert as_json.returncode == 0, as_json.stderr
    body = json.loads(as_json.stdout)
    assert body["conversation_id"] == conversation
    assert [(m["seq"], m["role"], m["origin"]) for m in body["items"]] == [
        (1, "user", "person"), (2, "assistant", None), (3, "tool", None),
        (4, "assistant", None), (5, "user", "task_result"), (6, "assistant", None)]
    assert body["items"][1]["tool_calls"][0]["name"] == "shell"


def test_b11_create_and_transcript_over_a_service(backend: Backend) -> None:
    with served(backend.url, "--token", "alice=tok-a", "--token", "bob=tok-b") as server:
        conversation = created_id("--url", server.url, "--token", "tok-a",
                                  "--profile", '{"model": "scripted", "system": "Be brief."}')
        headers = {"Authorization": "Bearer tok-a"}
        got = httpx.get(f"{server.url}/v1/conversations/{conversation}", headers=headers,
                        timeout=WAIT_S)
        assert got.status_code == 200
        assert got.json()["owner"] == "alice"  # the token's principal owns it
        assert got.json()["profile"]["system"] == "Be brief."
        assert tidings("post", "--url", server.url, "--token", "tok-a", conversation,
                       "hello there").returncode == 0
        url = f"{server.url}/v1/conversations/{conversation}/transcript"

        items = eventually_sync(
            lambda: httpx.get(url, headers=headers, timeout=WAIT_S).json()["items"],
            lambda items: len(items) >= 2, what="the answer in the transcript", within_s=WAIT_S,
            poll_s=0.05)

        shown = tidings("transcript", "--url", server.url, "--token", "tok-a", conversation)
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.splitlines() == ["person> hello there", "agent> hello there"]
        over_http = json.loads(tidings("transcript", "--url", server.url, "--token", "tok-a",
                                       "--json", conversation).stdout)
        assert over_http["items"] == items
        # The database itself gives the same messages in the same shape.
        over_db = json.loads(tidings("transcript", "--database", backend.url, "--json",
                                     conversation).stdout)
        assert over_db == over_http

        # Another principal's conversation answers as an unknown one.
        assert_one_line_error(tidings("transcript", "--url", server.url, "--token", "tok-b",
                                      conversation), "unknown_conversation")
        assert_one_line_error(tidings("create", "--url", server.url, "--token", "wrong"),
                              "unauthorized")


def test_b11_create_and_transcript_refuse_in_one_line(tmp_path: Path) -> None:
    database = str(tmp_path / "one.db")
    created_id("--database", database)
    assert_one_line_error(tidings("transcript", "--database", database, "conv_nope"),
                          "unknown_conversation")
    assert_one_line_error(tidings("transcript", "--database", str(tmp_path / "none.db"),
                                  "conv_x"), "no database at")
    missing = tidings("create", env={**ENV, "TIDINGS_TOKEN": ""})
    assert missing.returncode == 2
    assert "--token (or $TIDINGS_TOKEN) is needed" in missing.stderr
    both = tidings("create", "--url", "http://127.0.0.1:1", "--database", database)
    assert both.returncode == 2
    assert "not both" in both.stderr
    bad = tidings("create", "--database", database, "--profile", '{"model": "x", "tool": 1}')
    assert bad.returncode == 2
    assert "Invalid value for '--profile'" in bad.stderr


def test_b11_chat_reads_lines_from_a_pipe_and_quits_at_their_end(backend: Backend) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tidings", "chat", "--database", backend.url],
        input="hello\nsecond line\n", capture_output=True, text=True, timeout=120,
        check=False, env=ENV)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    conversation = re.search(CONV_ID, lines[0])
    assert conversation is not None, lines
    assert lines[1:] == ["you> hello", "agent> hello", "you> second line",
                         "agent> second line", "you> "]
    shown = tidings("transcript", "--database", backend.url, conversation.group(0))
    assert shown.stdout.splitlines() == ["person> hello", "agent> hello",
                                         "person> second line", "agent> second line"]
