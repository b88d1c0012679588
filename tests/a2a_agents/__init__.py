"""A2A agents for the tests, written with the ``a2a-sdk``'s server classes, served on loopback."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.mcp_servers.loopback import free_port, listening
from tidings import RemoteAgent

REMOTE = Path(__file__).with_name("remote.py")
TOKEN = "s3cret-p5"
TOKEN_ENV = "P5_REMOTE_TOKEN"


@contextlib.contextmanager
def remote_agent(state: Path, name: str = "helper", *, streaming: bool = True,
                 **options: object) -> Iterator[RemoteAgent]:
    """tests/a2a_agents/remote.py on a free loopback port (its bearer token ``TOKEN``, which
    tidings reads from ``TOKEN_ENV``; its card saying it streams, or not), for the block: its
    declaration."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(REMOTE), "--http", str(port), "--state", str(state),
         *([] if streaming else ["--no-streaming"])],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "REMOTE_TOKEN": TOKEN})
    try:
        listening(process, port, REMOTE.name)
        yield RemoteAgent(name, f"http://127.0.0.1:{port}", token_env=TOKEN_ENV,
                          **options)  # type: ignore[arg-type]
    finally:
        process.terminate()
        process.wait(10)


def received(state: Path) -> list[str]:
    """The texts of the messages the agent received, in order."""
    log = state / "received.log"
    return [line.split(" ", 1)[1] for line in log.read_text().splitlines()] \
        if log.exists() else []


def ended(state: Path) -> dict[str, int]:
    """When each task the agent completed ended: its id -> wall-clock microseconds."""
    log = state / "ended.log"
    return {task: int(at) for task, at in (line.split() for line in log.read_text().splitlines())} \
        if log.exists() else {}


def cancelled(state: Path) -> list[str]:
    """The task ids the agent was asked to cancel."""
    log = state / "cancelled.log"
    return log.read_text().split() if log.exists() else []
