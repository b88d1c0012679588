"""P6: a stock AG-UI client (``@ag-ui/client``'s ``HttpAgent``, from npm, under Node) drives
``tidings serve`` on both backends: it sees a streamed answer, a tool call with its result, a
later notice of the runtime's (never a user message), resumes after a dropped connection with
nothing lost and nothing twice, and answers a held tool call -- and an MCP server's question --
as an interrupt that its next run resumes. A plain SSE client's stream dropped mid-answer
resumes on another process of the cluster. Bad input is refused with a typed problem and
changes nothing; and the docs' examples run as written."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_sse import connect_sse

from tests.agui import agui_client, drive
from tests.conftest import Backend
from tests.service.test_b15_a2a_questions import booker_config
from tests.service.test_cli import WAIT_S, Served

CONFIG = """
[models.steps]
provider = "scripted"

[[models.steps.rules]]
when = { text_contains = "hello" }
reply = { text = "one two three four five six", chunks = 6, chunk_delay = 0.05 }

[[models.steps.rules]]
when = { text_contains = "list files" }
reply = { tool_calls = [{ name = "shell", arguments = { command = "echo hi" } }] }

[[models.steps.rules]]
when = { text_contains = "in the background" }
reply = { tool_calls = [{ name = "shell", arguments = { command = "echo built", \
  background = true } }] }

[[models.steps.rules]]
when = { meta_kind = "task_notification" }
reply = { text = "The build finished." }

[[models.steps.rules]]
when = { tool_result = "shell" }
reply = { text = "Here is what the tool said, in six pieces.", chunks = 6, chunk_delay = 0.1 }

[profiles.worker]
model = "steps"
tools = ["shell"]

[profiles.careful]
model = "steps"
tools = ["shell"]
approval_mode = "always"
"""

ALICE = {"Authorization": "Bearer tok-a"}
BOB = {"Authorization": "Bearer tok-b"}
TOOL_ANSWER = "Here is what the tool said, in six pieces."
Lines = list[dict[str, Any]]


@pytest.fixture
def server(backend: Backend, tmp_path: Path) -> Iterator[Served]:
    agui_client()  # installed before the server starts, not on its clock
    config = tmp_path / "tidings.toml"
    config.write_text(CONFIG, "utf-8")
    served = Served(backend.url, "--config", str(config), "--token", "alice=tok-a",
                    "--token", "bob=tok-b", "--operator-token", "tok-op")
    try:
        yield served.wait_ready()
    finally:
        served.kill()


def open_thread(url: str, profile: str, headers: dict[str, str] = ALICE) -> str:
    response = httpx.post(f"{url}/v1/conversations", json={"profile": profile},
                          headers=headers, timeout=WAIT_S)
    assert response.status_code == 201, response.text
    return str(response.json()["conversation_id"])


def events_of(lines: Lines, step: int) -> list[dict[str, Any]]:
    return [line["event"] for line in lines if line["step"] == step and "event" in line]


def end_of(lines: Lines, step: int) -> dict[str, Any]:
    return next(line["end"] for line in lines if line["step"] == step and "end" in line)


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [str(e["type"]) for e in events]


def seqs(events: list[dict[str, Any]]) -> list[int]:
    return [int(e["metadata"]["tidings"]["seq"]) for e in events
            if "seq" in (e.get("metadata") or {}).get("tidings", {})]


def text(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


def replay(url: str, thread: str, after: int) -> list[tuple[str | None, dict[str, Any]]]:
    """A plain SSE client's run with nothing new, from ``after``: (SSE id, event) each."""
    body = {"threadId": thread, "runId": "replay", "messages": [],
            "forwardedProps": {"tidings": {"after": after}}}
    with httpx.Client(timeout=WAIT_S) as http, connect_sse(
            http, "POST", f"{url}/v1/agui", json=body, headers=ALICE) as source:
        assert source.response.status_code == 200, source.response.read()
        return [(sse.id or None, json.loads(sse.data)) for sse in source.iter_sse()]


def test_p6_agui_client_streams_tools_notices_and_resumes_after_a_drop(
    server: Served,
) -> None:
    thread = open_thread(server.url, "worker")
    lines = drive(f"{server.url}/v1/agui", "tok-a", thread, [
        {"message": "hello"},
        {"message": "run it in the background"},
        {"header": True},  # nothing new: the notice the task's end brings, and its answer
        {"message": "list files", "dropAfter": 2},
        {"cursor": True},
    ], timeout=WAIT_S * 4)

    # A streamed answer, piece by piece, in one message, ended by RUN_FINISHED.
    answer = events_of(lines, 0)
    assert kinds(answer)[0] == "RUN_STARTED"
    assert kinds(answer)[-1] == "RUN_FINISHED"
    assert kinds(answer).count("TEXT_MESSAGE_CONTENT") >= 2
    assert text(answer) == "one two three four five six"
    assert end_of(lines, 0)["outcome"] == "success"

    # A tool call with its arguments and its result.
    tool = events_of(lines, 1)
    started = next(e for e in tool if e["type"] == "TOOL_CALL_START")
    assert started["toolCallName"] == "shell"
    args = "".join(e["delta"] for e in tool if e["type"] == "TOOL_CALL_ARGS")
    assert json.loads(args) == {"command": "echo built", "background": True}
    result = next(e for e in tool if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == started["toolCallId"]
    assert "background task" in result["content"]
    assert text(tool) == TOOL_ANSWER

    # Later, the runtime's notice (the task ended) as a CUSTOM event, then the answer to it.
    later = events_of(lines, 2)
    notice = next(e for e in later if e["type"] == "CUSTOM")
    assert notice["name"] == "tidings.notice"
    assert notice["value"]["origin"] == "task_result"
    assert "built" in notice["value"]["text"]
    assert text(later) == "The build finished."
    assert end_of(lines, 2)["outcome"] == "success"

    # Dropped mid-answer, then resumed from the last position it saw: the rest, once.
    dropped, resumed = events_of(lines, 3), events_of(lines, 4)
    assert "RUN_FINISHED" not in kinds(dropped)
    assert end_of(lines, 4)["outcome"] == "success"
    assert text(dropped) + text(resumed) == TOOL_ANSWER
    both = seqs(dropped) + seqs(resumed)
    assert len(both) == len(set(both))
    start = int(dropped[0]["metadata"]["tidings"]["after"])
    whole = replay(server.url, thread, start)
    assert both == seqs([e for _, e in whole])
    assert [int(str(i)) for i, e in whole if seqs([e])] == both  # and so are the SSE ids

    # What the client holds: the people's words it sent, the answers whole, no notice as a
    # user message.
    messages = end_of(lines, 4)["messages"]
    assert [m["content"] for m in messages if m["role"] == "user"] == [
        "hello", "run it in the background", "list files"]
    said = [m["content"] for m in messages if m["role"] == "assistant" and m.get("content")]
    assert said == ["one two three four five six", TOOL_ANSWER, "The build finished.",
                    TOOL_ANSWER]


def test_p6_agui_held_call_is_an_interrupt_the_next_run_resumes(server: Served) -> None:
    for approve in (True, False):
        thread = open_thread(server.url, "careful")
        lines = drive(f"{server.url}/v1/agui", "tok-a", thread, [
            {"message": "list files"}, {"resume": approve}], timeout=WAIT_S * 2)
        held = end_of(lines, 0)
        assert held["outcome"] == "interrupt"
        [interrupt] = held["interrupts"]
        call = next(e for e in events_of(lines, 0) if e["type"] == "TOOL_CALL_START")
        assert interrupt["reason"] == "tool_approval"
        assert interrupt["toolCallId"] == call["toolCallId"]
        assert interrupt["metadata"]["tidings"]["arguments"] == {"command": "echo hi"}
        approvals = httpx.get(f"{server.url}/v1/conversations/{thread}/approvals",
                              headers=ALICE, timeout=WAIT_S).json()["approvals"]
        assert [a["approval_id"] for a in approvals] == [interrupt["id"]]
        assert approvals[0]["decided_by"] == "alice"

        went_on = events_of(lines, 1)
        result = next(e for e in went_on if e["type"] == "TOOL_CALL_RESULT")
        assert result["toolCallId"] == call["toolCallId"]
        assert ("hi" in result["content"]) is approve
        assert end_of(lines, 1)["outcome"] == "success"
        assert text(went_on) == TOOL_ANSWER

    # A request that answers none of the open interrupts is told them at once.
    thread = open_thread(server.url, "careful")
    asked = sse_run(server.url, {"threadId": thread, "runId": "r-1", "messages": [
        {"id": "m-1", "role": "user", "content": "list files"}]})
    [open_one] = asked[-1]["outcome"]["interrupts"]
    again = sse_run(server.url, {"threadId": thread, "runId": "r-2", "messages": [
        {"id": "m-2", "role": "user", "content": "hello"}]})
    assert kinds(again) == ["RUN_STARTED", "RUN_FINISHED"]
    assert again[-1]["outcome"]["interrupts"] == [open_one]


def problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["code"] == code, body
    return dict(body)


def test_p6_agui_bad_input_is_refused_and_changes_nothing(server: Served) -> None:
    url = f"{server.url}/v1/agui"
    mine = open_thread(server.url, "careful")
    theirs = open_thread(server.url, "careful", BOB)

    def head(thread: str, headers: dict[str, str]) -> int:
        page = httpx.get(f"{server.url}/v1/conversations/{thread}/events.json",
                         headers=headers, timeout=WAIT_S).json()
        return int(page["next_after"])

    before = head(mine, ALICE), head(theirs, BOB)

    def run(thread: str, headers: dict[str, str] = ALICE, **extra: Any) -> httpx.Response:
        body = {"threadId": thread, "runId": "r-1", "messages": [
            {"id": "m-1", "role": "user", "content": "list files"}], **extra}
        return httpx.post(url, json=body, headers=headers, timeout=WAIT_S)

    # Another principal's thread is answered exactly as an unknown one.
    foreign = problem(run(theirs), 404, "unknown_conversation")
    unknown = problem(run("conv_" + "0" * 32), 404, "unknown_conversation")
    assert foreign["title"] == unknown["title"]
    assert foreign["detail"].replace(theirs, "ID") == unknown["detail"].replace(
        "conv_" + "0" * 32, "ID")
    problem(run("a-thread-of-the-client's-own"), 404, "unknown_conversation")
    # An invalid body names the field, as the client sent it.
    missing = problem(httpx.post(url, json={"runId": "r", "messages": []}, headers=ALICE,
                                 timeout=WAIT_S), 422, "invalid_input")
    assert ["body", "threadId"] in [e["loc"] for e in missing["errors"]]
    cursor = problem(run(mine, forwardedProps={"tidings": {"after": -1}}), 422,
                     "invalid_input")
    assert cursor["errors"][0]["loc"] == ["body", "forwardedProps", "tidings", "after"]
    resume = problem(run(mine, resume=[{"interruptId": "appr_x", "status": "resolved"}]),
                     404, "unknown_approval")
    assert "appr_x" in resume["detail"]
    problem(run(mine, messages=[{"id": "m-2", "role": "user", "content": " "}]), 422,
            "invalid_input")
    # Auth as on every route: a principal's token; an operator's alone is not one.
    problem(run(mine, {}), 401, "unauthorized")
    problem(run(mine, {"Authorization": "Bearer tok-op"}), 403, "forbidden")
    assert (head(mine, ALICE), head(theirs, BOB)) == before


def _docs() -> str:
    return (Path(__file__).parents[2] / "docs" / "ag-ui.md").read_text("utf-8")


def test_p6_agui_docs_examples_run(server: Served, tmp_path: Path) -> None:
    thread = open_thread(server.url, "worker")
    found = re.findall(r"```(javascript|python)\n(.*?)```", _docs(), re.S)
    assert [kind for kind, _ in found] == ["javascript", "python"]
    for kind, code in found:
        code = (code.replace("http://127.0.0.1:8080", server.url)
                .replace("secret-a", "tok-a").replace("CONVERSATION_ID", thread))
        if kind == "javascript":
            script = tmp_path / "example.mjs"
            # The example imports the package by name; here it is found under the tests' prefix.
            script.write_text(code.replace(
                'from "@ag-ui/client"',
                f'from "{agui_client()}/node_modules/@ag-ui/client/dist/index.mjs"'), "utf-8")
            command = ["node", str(script)]
        else:
            command = [sys.executable, "-c", code]
        ran = subprocess.run(command, capture_output=True, text=True, timeout=WAIT_S,
                             check=False)
        assert ran.returncode == 0, ran.stderr
        assert "one two three four five six" in ran.stdout, ran.stdout


def sse_run(url: str, body: dict[str, Any], *, last: int | None = None,
            drop_after: int | None = None) -> list[dict[str, Any]]:
    """A plain SSE client's run: its events, the connection dropped after ``drop_after``
    pieces of text; ``last``: the position to resume after, as ``Last-Event-ID``."""
    headers = ALICE if last is None else {**ALICE, "Last-Event-ID": str(last)}
    seen: list[dict[str, Any]] = []
    with httpx.Client(timeout=WAIT_S) as http, connect_sse(
            http, "POST", f"{url}/v1/agui", json=body, headers=headers) as source:
        assert source.response.status_code == 200, source.response.read()
        for sse in source.iter_sse():
            seen.append(json.loads(sse.data))
            if drop_after is not None and kinds(seen).count("TEXT_MESSAGE_CONTENT") >= (
                    drop_after):
                break  # leaving the block closes the connection mid-answer
    return seen


def test_p6_agui_resumes_mid_answer_on_another_process(backend: Backend, tmp_path: Path) -> None:
    """A stream dropped mid-answer resumes after its position with the text the client holds:
    on PostgreSQL on another process of the cluster, live; on SQLite on the same server."""
    agui_client()
    config = tmp_path / "tidings.toml"
    config.write_text(CONFIG, "utf-8")
    first = Served(backend.url, "--config", str(config), "--token", "alice=tok-a").wait_ready()
    other = (Served(backend.url, "--config", str(config), "--token", "alice=tok-a").wait_ready()
             if backend.name == "postgres" else first)
    try:
        thread = open_thread(first.url, "worker")
        asked = {"id": "m-1", "role": "user", "content": "hello"}
        body: dict[str, Any] = {"threadId": thread, "runId": "r-1", "messages": [asked]}
        dropped = sse_run(first.url, body, drop_after=2)
        after = int(dropped[0]["metadata"]["tidings"]["after"])
        piece = next(e for e in dropped if e["type"] == "TEXT_MESSAGE_CONTENT")
        held = {"id": piece["messageId"], "role": "assistant", "content": text(dropped)}
        rest = sse_run(other.url, {**body, "messages": [asked, held]}, last=after)
        assert kinds(rest)[-1] == "RUN_FINISHED"
        assert text(dropped) + text(rest) == "one two three four five six"
        assert {e["messageId"] for e in rest if e["type"].startswith("TEXT_")} == {
            piece["messageId"]}
        # The same message id again posts nothing: the conversation has one person's input.
        inputs = httpx.get(f"{first.url}/v1/conversations/{thread}/transcript", headers=ALICE,
                           timeout=WAIT_S).json()["items"]
        assert [m["content"] for m in inputs if m["role"] == "user"] == ["hello"]
    finally:
        first.kill()
        other.kill()


def test_p6_agui_mcp_question_is_an_interrupt_its_form_answers(
    backend: Backend, tmp_path: Path,
) -> None:
    """An MCP server's question ends the run as an interrupt carrying its form; an answer off
    the form is refused (422) and the question still waits; the next run's resume answers it
    and the same run goes on."""
    agui_client()
    config = tmp_path / "tidings.toml"
    config.write_text(booker_config(tmp_path), "utf-8")
    server = Served(backend.url, "--config", str(config), "--token", "alice=tok-a")
    try:
        server.wait_ready()
        thread = open_thread(server.url, "booker")
        url = f"{server.url}/v1/agui"
        [asked] = drive(url, "tok-a", thread, [{"message": "book a table"}],
                        timeout=WAIT_S)[-1:]
        [question] = asked["end"]["interrupts"]
        assert asked["end"]["outcome"] == "interrupt"
        assert question["reason"] == "question"
        assert question["message"] == "How many seats on June 9?"
        assert question["responseSchema"]["required"] == ["seats"]
        # Off the form: refused, and the question still waits.
        off = problem(httpx.post(url, json={
            "threadId": thread, "runId": "r-2", "messages": [],
            "resume": [{"interruptId": question["id"], "status": "resolved",
                        "payload": {"seats": "many"}}]}, headers=ALICE, timeout=WAIT_S),
            422, "invalid_input")
        assert off["errors"][0]["loc"] == ["body", "resume", 0, "payload", "seats"]
        pending = httpx.get(f"{server.url}/v1/conversations/{thread}/questions",
                            params={"status": "pending"}, headers=ALICE,
                            timeout=WAIT_S).json()
        assert [q["question_id"] for q in pending["questions"]] == [question["id"]]
        # The stock client answers it: a new client on the thread, its interrupt still open.
        lines = drive(url, "tok-a", thread, [{}, {"answer": {"seats": 2}}], timeout=WAIT_S)
        assert end_of(lines, 0)["interrupts"] == [question]
        went_on = events_of(lines, 1)
        result = next(e for e in went_on if e["type"] == "TOOL_CALL_RESULT")
        assert "booked 2 seats on June 9" in result["content"]
        assert text(went_on) == "Booked it."
        assert end_of(lines, 1)["outcome"] == "success"
    finally:
        server.kill()
