"""Small MCP servers written with the ``mcp`` SDK's server API, run by the tests, and the
declarations that start them."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from tidings import MCPServer

WEATHER = Path(__file__).with_name("weather.py")
KETTLE = Path(__file__).with_name("slow_tasks.py")
OVEN = Path(__file__).with_name("oven.py")
DESK = Path(__file__).with_name("desk.py")
EVERYTHING_VERSION = "2026.8.31"
"""The reference server ``@modelcontextprotocol/server-everything`` the tests run (npm)."""
NPM_CACHE = Path(__file__).resolve().parents[2] / ".cache" / "npm"


def oven_stdio(state: Path, name: str = "oven", **options: Any) -> MCPServer:
    """The FastMCP oven server (its tools run as tasks on the extension's wire) as a stdio
    subprocess, its markers in ``state``."""
    return MCPServer(name, command=[sys.executable, str(OVEN)],
                     env={"OVEN_DIR": str(state), "FASTMCP_LOG_LEVEL": "ERROR"}, **options)


def desk_stdio(state: Path, name: str = "desk", **options: Any) -> MCPServer:
    """The FastMCP booking desk (its tools ask a person; ``order`` runs as a task) as a stdio
    subprocess, its log in ``state``."""
    return MCPServer(name, command=[sys.executable, str(DESK)],
                     env={"DESK_DIR": str(state), "FASTMCP_LOG_LEVEL": "ERROR"}, **options)


def everything_stdio(name: str = "everything", **options: Any) -> MCPServer:
    """``@modelcontextprotocol/server-everything`` (core tasks, 2025-11-25) from npm, under
    Node, as a stdio subprocess; installed into ``.cache/npm`` the first time."""
    package = NPM_CACHE / "node_modules" / "@modelcontextprotocol" / "server-everything"
    if not (package / "dist" / "index.js").exists():
        subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix",
                        str(NPM_CACHE),
                        f"@modelcontextprotocol/server-everything@{EVERYTHING_VERSION}"],
                       check=True, timeout=600)
    return MCPServer(name, command=["node", str(package / "dist" / "index.js"), "stdio"],
                     env={"PATH": os.environ.get("PATH", "")}, **options)


def weather_stdio(name: str = "weather", **options: Any) -> MCPServer:
    """The weather server as a stdio subprocess of the runtime."""
    return MCPServer(name, command=[sys.executable, str(WEATHER)], **options)


def kettle_env(state: Path, *, poll_ms: int = 50,
               wire: Literal["extension", "core"] = "extension") -> dict[str, str]:
    """The kettle's environment: its tasks kept in ``state``, ``poll_ms`` suggested between
    two polls of a task, on the tasks extension's wire or on core tasks (2025-11-25)."""
    return {"SLOW_TASKS_DIR": str(state), "SLOW_TASKS_POLL_MS": str(poll_ms),
            "SLOW_TASKS_WIRE": wire}


def kettle_stdio(state: Path, name: str = "kettle", *, poll_ms: int = 50,
                 wire: Literal["extension", "core"] = "extension",
                 **options: Any) -> MCPServer:
    """The kettle server (tools run as tasks, ended by marker files) as a stdio subprocess
    (see :func:`kettle_env`)."""
    return MCPServer(name, command=[sys.executable, str(KETTLE)],
                     env=kettle_env(state, poll_ms=poll_ms, wire=wire), **options)


def kettle_requests(state: Path) -> list[tuple[int, str, str]]:
    """The kettle's ``tasks/*`` requests so far: ``(server pid, method, task id)``."""
    log = state / "requests.log"
    if not log.exists():
        return []
    rows = [line.split() for line in log.read_text().splitlines() if line.strip()]
    return [(int(pid), method, task_id) for pid, method, task_id in rows]


@contextlib.contextmanager
def weather_http(name: str = "weather", **options: Any) -> Iterator[MCPServer]:
    """The weather server over streamable HTTP on a free loopback port, for the block."""
    from tests.mcp_servers.loopback import served

    with served(WEATHER, name, **options) as server:
        yield server


LONG = timedelta(hours=1)
"""A reconnect backoff no test waits out: the server stays down for the rest of the test."""
