"""B4: an MCP server that dies is reported in the feed of the conversations concerned, and so is
its return -- against the real weather server (tests/mcp_servers/weather.py), killed mid-call by
its own ``crash`` tool or from outside with SIGKILL, and one that cannot start until it may.

The reports are events the runtime journals (``mcp_call_failed`` on the run whose call failed,
``mcp_server_status`` in each conversation that used the server), never inputs: no turn starts
for them."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from tests.conftest import Backend, RuntimeFactory
from tests.crash.helpers import count_rows
from tests.mcp_servers import WEATHER, weather_stdio
from tests.scenarios.test_b4_mcp import calling, conversation, turn, up, weather_runtime
from tests.waiting import eventually
from tidings import MCPServer, ScriptedModel
from tidings.runtime.root import Runtime, RuntimeConfig
from tidings.types import Event

QUICK: dict[str, Any] = {"reconnect_base": timedelta(milliseconds=50),
                         "reconnect_cap": timedelta(seconds=1)}


def statuses(events: list[Event]) -> list[dict[str, Any]]:
    return [dict(e.data) for e in events if e.type == "mcp_server_status"]


async def status_events(rt: Runtime, conv: str, count: int) -> list[dict[str, Any]]:
    """The conversation's ``mcp_server_status`` events, once there are ``count`` of them."""
    events = await eventually(lambda: rt.events(conv), lambda es: len(statuses(es)) >= count,
                              what=f"{count} mcp_server_status events in {conv}")
    return statuses(events)


def gated_weather(allowed: Path) -> MCPServer:
    """The weather server, which exits at once (a server that cannot start) while ``allowed``
    is missing, and is tried again meanwhile; ``allowed`` is made here."""
    allowed.touch()
    return MCPServer("weather", command=[
        "/bin/sh", "-c", f'test -e "{allowed}" && exec "{sys.executable}" "{WEATHER}"'], **QUICK)


async def test_b4_a_server_that_dies_mid_call_is_said_on_the_run_and_in_the_feed(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    marker = tmp_path / "crash-once"
    marker.touch()
    server = weather_stdio(env={"WEATHER_CRASH_MARKER": str(marker)}, **QUICK)
    rt = await weather_runtime(runtimes, server, [
        *calling("weather.forecast", {"city": "Oslo"}, when="first"),
        *calling("weather.crash", {"city": "Oslo"}, when="crash"),
    ])
    conv = await conversation(rt, "weather.crash", "weather.forecast")
    await turn(rt, conv, "first")
    (crashed,) = await turn(rt, conv, "crash")
    assert not marker.exists()  # the server did exit in the middle of the call

    events = await rt.events(conv)
    (failed,) = [e for e in events if e.type == "mcp_call_failed"]
    assert failed.run_id == crashed.run_id  # the run whose call it was
    assert failed.data["call_id"] == crashed.tool_call_id
    assert (failed.data["tool"], failed.data["server"], failed.data["error"]) == (
        "weather.crash", "weather", "mcp_unavailable")
    assert "broke during the call" in failed.data["reason"]
    # In the same commit as the call's result: nothing between them.
    result_seq = next(e.seq for e in events if e.type == "message_committed"
                      and e.data["message"]["message_id"] == crashed.message_id)
    assert failed.seq == result_seq + 1

    # The server's death, then its return, in the conversation that used it.
    gone, back = await status_events(rt, conv, 2)
    assert (gone["server"], gone["status"]) == ("weather", "disconnected")
    assert gone["reason"]
    assert back == {"server": "weather", "status": "connected", "connections": 2}
    assert up(rt) == 1.0


async def test_b4_a_server_killed_between_calls_is_reported_to_the_conversations_that_used_it(
    runtimes: RuntimeFactory,
) -> None:
    rt = await weather_runtime(runtimes, weather_stdio(**QUICK), [
        *calling("weather.pid", {}, when="pid"),
    ])
    used = await conversation(rt, "weather.pid")
    offered = await conversation(rt, "weather.pid")  # offers the tools, never called them
    (pid,) = await turn(rt, used, "pid")
    runs_before = len(await rt.runs.list(used))

    os.kill(int(pid.content), signal.SIGKILL)

    gone, back = await status_events(rt, used, 2)
    assert (gone["status"], back["status"]) == ("disconnected", "connected")
    assert "closed" in gone["reason"]
    assert back["connections"] == 2
    assert statuses(await rt.events(offered)) == []
    # Events of the runtime, not inputs: no turn started for them.
    assert len(await rt.runs.list(used)) == runs_before
    assert not [e for e in await rt.events(used) if e.type == "mcp_call_failed"]
    (again,) = await turn(rt, used, "pid")
    assert int(again.content) != int(pid.content)  # a new server process answers


async def test_b4_a_call_while_the_server_is_down_is_said_and_told_when_it_is_back(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    allowed = tmp_path / "may-start"
    server = gated_weather(allowed)
    rt = await weather_runtime(runtimes, server, [
        *calling("weather.pid", {}, when="pid"),
        *calling("weather.forecast", {"city": "Oslo"}, when="forecast"),
    ])
    used = await conversation(rt, "weather.pid")
    later = await conversation(rt, "weather.forecast")  # calls only while the server is down
    (pid,) = await turn(rt, used, "pid")
    allowed.unlink()
    os.kill(int(pid.content), signal.SIGKILL)
    (gone,) = await status_events(rt, used, 1)
    assert gone["status"] == "disconnected"

    (refused,) = await turn(rt, later, "forecast")
    assert refused.meta["error"] == "mcp_unavailable"
    (failed,) = [e for e in await rt.events(later) if e.type == "mcp_call_failed"]
    assert (failed.run_id, failed.data["tool"]) == (refused.run_id, "weather.forecast")
    assert statuses(await rt.events(later)) == []  # it had not used the server before

    allowed.touch()

    (back,) = await status_events(rt, later, 1)
    assert back == {"server": "weather", "status": "connected", "connections": 2}
    assert [s["status"] for s in await status_events(rt, used, 2)] == [
        "disconnected", "connected"]


async def test_b4_who_heard_of_an_outage_hears_the_server_is_back_after_a_restart(
    backend: Backend, tmp_path: Path,
) -> None:
    allowed = tmp_path / "may-start"
    server = gated_weather(allowed)
    model = ScriptedModel(rules=calling("weather.pid", {}, when="pid"))

    def opened() -> contextlib.AbstractAsyncContextManager[Runtime]:
        return Runtime.open(backend.url, models=[model],
                            config=RuntimeConfig(mcp_servers=(server,)))

    async with opened() as first:
        conv = await conversation(first, "weather.pid")
        (pid,) = await turn(first, conv, "pid")
        allowed.unlink()
        os.kill(int(pid.content), signal.SIGKILL)
        (gone,) = await status_events(first, conv, 1)
        assert gone["status"] == "disconnected"
    # The runtime that told it stopped while the server was down; another one starts.
    allowed.touch()
    async with opened() as second:
        await second.mcp["weather"].until_up()
        gone, back = await status_events(second, conv, 2)
        assert gone["status"] == "disconnected"
        assert back == {"server": "weather", "status": "connected", "connections": 1}
    # Told once: no one is left to tell when the server is back again.
    assert count_rows(backend.url, "mcp_outage_told") == 0
