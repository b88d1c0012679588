"""B2 from the command line: ``tidings post ... --wait [SECONDS]`` against a real ``tidings
serve`` prints the reply of the run that read the input; when that run did not complete -- it
failed, holds for an approval, or the wait timed out -- it says how things stand in one line on
stderr and exits 1. On both backends."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx

from tests.conftest import Backend
from tests.service.test_cli import WAIT_S, assert_one_line_error, served, tidings

RULES = {
    "name": "scripted",
    "rules": [
        {"when": {"text_contains": "take your time"},
         "reply": {"text": "finally", "delay_seconds": 60}},
        {"when": {"text_contains": "fail now"}, "reply": {"error": "permanent"}},
        {"when": {"tool_result": "shell"}, "reply": {"text": "Ran it."}},
        {"when": {"text_contains": "run it"},
         "reply": {"tool_calls": [{"name": "shell", "arguments": {"command": "true"}}]}},
    ],
    "default": {"echo": True},
}


def database(backend: Backend, tmp_path: Path) -> str:
    return str(tmp_path / "wait.db") if backend.name == "sqlite" else backend.url


def conversation(url: str, **profile: object) -> str:
    response = httpx.post(f"{url}/v1/conversations",
                          json={"profile": {"model": "scripted", **profile}},
                          headers={"Authorization": "Bearer tok-a"}, timeout=WAIT_S)
    assert response.status_code == 201, response.text
    return str(response.json()["conversation_id"])


def test_b2_post_wait_prints_the_reply_or_says_how_things_stand(
    backend: Backend, tmp_path: Path
) -> None:
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps(RULES), "utf-8")
    with served(database(backend, tmp_path), "--token", "alice=tok-a",
                "--model", f"scripted:{rules}") as server:
        client = ("post", "--url", server.url, "--token", "tok-a")
        conv = conversation(server.url)

        answered = tidings(*client, conv, "hello there", "--wait")
        assert answered.returncode == 0, answered.stderr
        assert answered.stdout == "hello there\n"

        failed = tidings(*client, conv, "fail now", "--wait=10")
        assert failed.stdout == ""
        assert_one_line_error(failed, "failed (")
        assert re.search(r"run run_[0-9a-f]+ failed \(\w+\)", failed.stderr), failed.stderr

        held = tidings(*client, conversation(server.url, tools=["shell"],
                                             approval_mode="writes"), "run it", "--wait", "10")
        assert_one_line_error(held, "awaits a person's approval of a tool call")
        assert "tidings approve (or deny) decides" in held.stderr  # and says how to decide

        slow = tidings(*client, conv, "take your time", "--wait", "0.5")
        assert_one_line_error(slow, "no answer within 0.5s: run run_")
        assert "is running; the input stays accepted" in slow.stderr
        listed = httpx.get(f"{server.url}/v1/conversations/{conv}/inputs",
                           headers={"Authorization": "Bearer tok-a"}, timeout=WAIT_S)
        assert "take your time" in [i["content"] for i in listed.json()["items"]]  # accepted

        refused = tidings(*client, conv, "hello", "--wait", "301")
        assert refused.returncode == 2  # a usage error: nothing was posted
        assert "0<x<=300" in refused.stderr
