"""A3: the command line, through a real subprocess."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import Backend


def _tidings(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidings", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a3_demo_runs_the_promise_end_to_end_offline() -> None:
    result = _tidings("demo")
    assert result.returncode == 0, result.stderr
    out = " ".join(result.stdout.split())
    assert "created=False" in out  # a repeated idempotency key returns the first event
    assert "stale_lease" in out  # the stalled turn's late ack is refused
    assert "dead_letter" in out  # a persistent failure ends in a dead letter
    assert "now outcome_unknown (never replayed)" in out  # the SIGKILLed victim's operation
    assert "claimable again" in out


def test_a3_status_shows_backlog_and_dead_letters(backend: Backend) -> None:
    result = _tidings("status", "--database", backend.url)
    assert result.returncode == 0, result.stderr
    assert "backlog" in result.stdout
    assert "dead letters" in result.stdout


def test_a3_status_refuses_an_unknown_database_url() -> None:
    result = _tidings("status", "--database", "mysql://nowhere/db")
    assert result.returncode != 0
    assert "invalid_input: unsupported database URL" in result.stderr
    assert "Traceback" not in result.stderr
