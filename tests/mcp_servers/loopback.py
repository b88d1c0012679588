"""Servers of tests/mcp_servers/ over streamable HTTP on a free loopback port."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.waiting import START_S, wait_until_sync
from tidings import MCPServer

HERE = Path(__file__).parent
BULKY = HERE / "bulky.py"
RAW_LISTING = HERE / "raw_listing.py"
GATED = HERE / "gated.py"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def listening(process: subprocess.Popen[bytes], port: int, name: str) -> None:
    """Wait until ``process`` accepts connections on ``port`` (a failed start fails the test)."""

    def accepts() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"{name} exited: {process.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return True
        return False

    wait_until_sync(accepts, what=f"{name} accepts connections on port {port}", within_s=START_S,
                    poll_s=0.05)


@contextlib.contextmanager
def served(script: Path, name: str, *args: str, env: dict[str, str] | None = None,
           **options: Any) -> Iterator[MCPServer]:
    """``script --http PORT *args`` on a free loopback port, for the block: its declaration."""
    port = free_port()
    process = subprocess.Popen([sys.executable, str(script), "--http", str(port), *args],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env=None if env is None else {**os.environ, **env})
    try:
        listening(process, port, script.name)
        yield MCPServer(name, url=f"http://127.0.0.1:{port}/mcp", **options)
    finally:
        process.terminate()
        process.wait(10)


def stdio(script: Path, name: str, **options: Any) -> MCPServer:
    """``script`` as a stdio subprocess of the runtime."""
    return MCPServer(name, command=[sys.executable, str(script)], **options)
