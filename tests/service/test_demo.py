"""A3: ``tidings demo`` runs the whole mission offline -- a background task's notification, a
crash and an authorized restart mid-task (T1-T9, L2, S9), a tool of an MCP server over stdio
(B4), a remote A2A agent as a child (P5) -- and its summary, read from the database, holds.
U5: as a user reads it (piped, the terminal's default width), it speaks plainly, and its
closing summary counts what its own timeline showed. One run of the demo serves both."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import Backend
from tests.service.test_cli import ENV, tidings
from tests.service.test_u5_plain_words import JARGON, LINE

CHECKS = (
    "every ended task notified exactly once",
    "every notice placed after its task's tool result",
    "every notice came in as an input of the conversation",
    "nothing placed between a tool call and its result",
    "every notice handed to the model was read",
    "the build's end answered in a woken turn",
    "the task interrupted by the crash not recorded as success",
    "the task interrupted by the restart not recorded as success",
    "no tool re-run after a crash or restart",
    "the restart completed, and answered exactly once",
    "no two turns of the conversation overlap in time",
    "every tool call answered by exactly one result",
    "both children's replies passed on once and answered in one turn",
    "an answer streamed to a watcher, then saved whole",
    "a tool of an MCP server called over stdio, its result answered",
    "a repeated idempotency key publishes nothing new",
    "a stalled worker's late acknowledgement is refused and changes nothing",
    "a delivery that keeps failing ends as a dead letter, kept in sight",
    "the background MCP task's end told once, after its result",
    "a remote A2A agent's answer passed on to its parent once",
)


def assert_every_check_passed(out: str) -> None:
    for name in CHECKS:
        assert f"✓ {name} — " in out, name
    assert "✗" not in out
    assert f"{len(CHECKS)} of {len(CHECKS)} checks passed" in out


def test_a3_u5_the_demo_runs_the_mission_offline_and_tells_it_plainly() -> None:
    """One run of ``tidings demo`` as a user runs it (piped, the terminal's width not set)."""
    env = {k: v for k, v in ENV.items() if k not in ("COLUMNS", "LINES")}
    demo = subprocess.run([sys.executable, "-m", "tidings", "demo"], capture_output=True,
                          text=True, timeout=180, check=False, env=env)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "Traceback" not in demo.stderr
    mission_checks(demo.stdout)
    plain_words(demo.stdout)


def mission_checks(out: str) -> None:
    """A3: every check passes, and the timeline shows each part of the mission."""
    assert_every_check_passed(out)
    # a) the model starts a real command in the background and ends its turn
    assert re.search(r"model +calls shell\(background=true\): python3 -c", out)
    # b) its notification lands after the tool result, wakes a turn, is consumed
    assert re.search(r"runtime +tells the model: background task bg-\w+ ended \(exited, exit 0, "
                     r"output 'build ok'\)", out)
    assert re.search(r"turn 2 starts \(woken by a background task's end\) → completed", out)
    assert "its notice was handed to the model and read, as message 5" in out
    # c) a crash (SIGKILL): the task is lost; an authorized restart: accepted, then completed
    assert re.search(r"SIGKILL to process \d+ while bg-\w+ runs", out)
    assert re.search(r"background task bg-\w+ ended \(lost\)", out)
    assert re.search(r"restart recorded: accepted, not completed \(operation op_\w+, reason: "
                     r"demo restart\)", out)
    assert re.search(r"restart completed by instance inst_\w+ \(the one before: inst_\w+\); "
                     r"the task it cut short: bg-\w+ \((killed|lost)\)", out)
    assert re.search(r"operation op_\w+: accepted → completed", out)
    assert out.count("The runtime restarted as you asked") == 1
    # d) a tool of the MCP server the package ships, run by the runtime over stdio
    assert re.search(r"started MCP server 'demo' \(process \d+, over stdio\): demo\.changelog",
                     out)
    assert 'calls demo.changelog(version="2.0")' in out
    assert re.search(r"MCP server process \d+ ended with it", out)
    # e) an MCP server's tool runs as the server's task; its end is a task notice too
    assert re.search(r"started background task bg-\w+ \(docs\.render, run by the", out)
    assert re.search(r"background task bg-\w+ ended \(exited, exit 0, output "
                     r"'rendered 12 pages of docs'\)", out)
    # f) a remote A2A agent (the a2a-sdk's, on loopback) as a child: its answer as child mail
    assert re.search(r"A2A agent 'editor' \(a2a-sdk\) serving on http://127\.0\.0\.1:\d+", out)
    assert re.search(r'calls spawn\(agent="editor"', out)
    assert re.search(r"child-\w+: remote child editor .* reply completed and passed on to this "
                     r"conversation once", out)


def plain_words(out: str) -> None:
    """U5: no builders' words, no line wrapped, and the summary counts its own timeline."""
    assert JARGON.findall(out) == []
    lines = [line for line in out.splitlines() if line.strip()]
    assert [line for line in lines if not LINE.match(line)] == []  # nothing wrapped

    turns = [int(n) for n in re.findall(r"turn (\d+) starts \(", out)]
    assert turns == list(range(1, len(turns) + 1))
    ended = dict(re.findall(r"process +(bg-\w+) ended: (\w+)", out))
    cut = sum(1 for state in ended.values() if state in ("lost", "killed"))
    summary = re.search(r"checks passed · (\d+) turns, (\d+) background tasks \((\d+) cut "
                        r"short by the crash and the restart\)$", lines[-1])
    assert summary is not None, lines[-1]
    assert [int(n) for n in summary.groups()] == [len(turns), len(ended), cut]
    assert (len(turns), len(ended), cut) == (13, 4, 2)  # the story as the demo tells it


def test_l2_demo_on_either_backend_leaves_a_database_the_cli_can_inspect(
    backend: Backend,
) -> None:
    result = tidings("demo", "--database", backend.url, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert_every_check_passed(result.stdout)

    status = tidings("status", "--database", backend.url)
    assert status.returncode == 0, status.stderr
    assert "1 dead letter(s)" in status.stdout
    letters = tidings("dead-letters", "--database", backend.url)
    assert letters.returncode == 0, letters.stderr
    assert "dead letters (1)" in letters.stdout
    assert "model_unavailable" in letters.stdout
