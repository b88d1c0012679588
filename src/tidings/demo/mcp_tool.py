"""The demo's MCP phase: the model calls a tool of an MCP server the runtime runs over stdio.

The server (:mod:`tidings.demo.mcp_server`) ships in the package and is started with the
runtime as ``python -m tidings.demo.mcp_server``; its tools are the runtime's as
``demo.<tool>``. When the runtime closes, the server's process ends with it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tidings.demo.timeline import Snapshot, Timeline, snapshot
from tidings.mcp import MCPServer
from tidings.models.scripted import Rule, ScriptedModel
from tidings.records.results import MasterKey
from tidings.runtime.root import Runtime, RuntimeConfig
from tidings.types import Profile

SERVER = "demo"
TOOL = f"{SERVER}.changelog"
REQUEST = "What changed in release 2.0? Ask the changelog server."
ANSWER = "Release 2.0 has 12 changes, 2 of them breaking; the config file moved."
PROFILE = Profile(model="scripted", tools=(TOOL,))

MODEL = ScriptedModel(rules=[
    Rule({"text_contains": REQUEST},
         {"tool_calls": [{"name": TOOL, "arguments": {"version": "2.0"}}]}),
    Rule({"tool_result": TOOL}, {"text": ANSWER}),
], default={"text": "Noted."})
"""The phase's scripted model: a real one would choose the call itself."""


def server() -> MCPServer:
    """The demo's MCP server, as a stdio subprocess of the runtime."""
    return MCPServer(SERVER, command=[sys.executable, "-m", "tidings.demo.mcp_server"],
                     env={key: os.environ[key] for key in ("PYTHONPATH",) if key in os.environ})


@dataclass(frozen=True, slots=True)
class MCPPhase:
    """What the phase left: the conversation, and the server's process."""

    view: Snapshot
    server_pid: int | None
    server_ended: bool
    """Whether the server's process was gone once the runtime had closed."""


async def mcp_phase(url: str, *, config: RuntimeConfig, master_key: MasterKey,
                    timeline: Timeline, now: Callable[[], int]) -> MCPPhase:
    """Open a runtime with the demo's MCP server, ask a question its tool answers, close."""
    opening = now()
    async with Runtime.open(url, models=[MODEL], config=config, master_key=master_key,
                            mcp_servers=[server()]) as rt:
        offered = sorted(n for n in rt.tools.names() if n.startswith(f"{SERVER}."))
        pid = _pid(await rt.mcp[SERVER].call("pid", {}))
        timeline.note(opening, "host", f"instance {rt.instance_id} up; it started MCP server "
                      f"{SERVER!r} (process {pid}, over stdio): {', '.join(offered)}")
        conv = (await rt.create_conversation("alice", PROFILE, title="mcp")).conversation_id
        await rt.post(conv, REQUEST, wait=True)
        view = await snapshot(rt.store, conv)
        timeline.show(view)
    ended = pid is not None and not _alive(pid)
    timeline.note(now(), "host", f"instance {rt.instance_id} shut down; MCP server process "
                  f"{pid} {'ended with it' if ended else 'is still running'}")
    return MCPPhase(view, pid, ended)


def _pid(output: Any) -> int | None:
    with contextlib.suppress(ValueError):
        return int(output.content)
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


__all__ = ("ANSWER", "MODEL", "REQUEST", "TOOL", "MCPPhase", "mcp_phase", "server")
