"""A3: ``tidings demo`` runs the whole mission offline -- a background task's notification, a
crash and an authorized restart mid-task (T1-T9, L2, S9), a tool of an MCP server over stdio
(B4) -- and its summary, read from the database, holds."""

from __future__ import annotations

import re
import time
from pathlib import Path

from tests.conftest import Backend
from tests.service.test_cli import tidings

CHECKS = (
    "every ended task notified exactly once",
    "every notification after its task's tool result",
    "every notification an input of the conversation's door",
    "nothing placed between a tool call and its result",
    "every delivered notification consumed",
    "the build's end answered in a woken turn",
    "the task interrupted by the crash not recorded as success",
    "the task interrupted by the restart not recorded as success",
    "no tool re-run after a crash or restart",
    "restart_completed handled exactly once",
    "no two runs of the conversation overlap in time",
    "transcript pairing intact",
    "both children's replies relayed once and answered in one supplementary turn",
    "an answer streamed to a watcher, then committed whole",
    "a tool of an MCP server called over stdio, its result answered",
    "a repeated idempotency key publishes nothing new",
    "a stale lease's ack is refused and changes nothing",
    "a spent attempt budget ends in a visible dead letter",
    "the background MCP task's end told once, after its result",
)


def assert_every_check_passed(out: str) -> None:
    for name in CHECKS:
        assert f"✓ {name} — " in out, name
    assert "✗" not in out
    assert f"{len(CHECKS)} of {len(CHECKS)} checks passed" in out


def test_a3_demo_runs_the_mission_offline_and_every_check_passes(tmp_path: Path) -> None:
    started = time.monotonic()
    result = tidings("demo", timeout=120)
    took = time.monotonic() - started
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert took < 60
    out = result.stdout
    assert_every_check_passed(out)
    # a) the model starts a real command in the background and ends its turn
    assert re.search(r"model +calls shell\(background=true\): python3 -c", out)
    # b) its notification lands after the tool result, wakes a turn, is consumed
    assert re.search(r"runtime +task_notification bg-\w+: state exited, exit 0, output "
                     r"'build ok'", out)
    assert re.search(r"turn 2 starts \(wake\) → completed", out)
    assert "delivered=1 consumed=1" in out
    # c) a crash (SIGKILL): the task is lost; an authorized restart: accepted, then completed
    assert re.search(r"SIGKILL to process \d+ while bg-\w+ runs", out)
    assert re.search(r"task_notification bg-\w+: state lost", out)
    assert "committed: accepted, not completed (reason: demo restart)" in out
    assert re.search(r"restart_completed by instance inst_\w+ \(previous inst_\w+\); "
                     r"interrupted: bg-\w+ (killed|lost)", out)
    assert re.search(r"operation op_\w+: accepted → completed", out)
    assert out.count("The runtime restarted as you asked") == 1
    # d) a tool of the MCP server the package ships, run by the runtime over stdio
    assert re.search(r"started MCP server 'demo' \(process \d+, over stdio\): demo\.changelog",
                     out)
    assert 'calls demo.changelog(version="2.0")' in out
    assert re.search(r"MCP server process \d+ ended with it", out)
    # e) an MCP server's tool runs as the server's task; its end is a task notice too
    assert re.search(r"started background task bg-\w+ \(docs\.render, run by the", out)
    assert re.search(r"task_notification bg-\w+: state exited, exit 0, output "
                     r"'rendered 12 pages of docs'", out)


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
