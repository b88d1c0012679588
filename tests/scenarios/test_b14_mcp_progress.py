"""B14: progress -- a call carries a progress token, the server's progress notifications reach
the calling conversation's feed (``mcp_progress``, on the calling run), and they are signs of
life: a slow call that keeps reporting outlives its idle timeout, a silent one does not.

Against the real bulky server (tests/mcp_servers/bulky.py, the SDK's ``MCPServer``), whose
``steps`` tool sleeps and reports progress with ``ctx.report_progress``.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from tests.conftest import RuntimeFactory
from tests.feeding import Collector
from tests.mcp_servers.loopback import BULKY, served, stdio
from tests.scenarios.test_b4_mcp import calling, conversation, turn
from tidings import MCPServer, ScriptedModel
from tidings.runtime.root import Runtime, RuntimeConfig
from tidings.types import Event, FeedEvent


def progress_of(events: list[Event] | list[FeedEvent]) -> list[Any]:
    return [e for e in events if e.type == "mcp_progress"]


async def bulky_runtime(runtimes: RuntimeFactory, server: MCPServer, **steps: Any) -> Runtime:
    return await runtimes(
        models=[ScriptedModel(rules=calling("bulky.steps", steps, when="go"))],
        config=RuntimeConfig(mcp_servers=(server,)))


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_b14_progress_notifications_reach_the_feed_on_the_calling_run(
    runtimes: RuntimeFactory, transport: str,
) -> None:
    async def check(server: MCPServer) -> None:
        rt = await bulky_runtime(runtimes, server, seconds=1.5, every=0.25)
        conv = await conversation(rt, "bulky.steps")
        watcher = Collector(rt.watch(conv))
        (result,) = await turn(rt, conv, "go")
        assert result.meta["is_error"] is False
        assert result.content.startswith("done after")

        events = progress_of(await rt.events(conv))
        assert events, "no mcp_progress event"
        for event in events:
            assert event.run_id == result.run_id
            assert event.data["call_id"] == result.tool_call_id
            assert (event.data["tool"], event.data["server"]) == ("bulky.steps", "bulky")
            assert event.data["total"] == 1.5
            assert 0 < event.data["progress"] <= 1.5
            assert event.data["message"].startswith("step ")
        # In order, and the call's last word is there.
        assert [e.data["progress"] for e in events] == sorted(e.data["progress"] for e in events)
        steps = int(result.content.split()[2])
        assert events[-1].data["message"] == f"step {steps}"

        # A watcher of the feed sees them as they come.
        try:
            seen = await watcher.until(lambda es: len(progress_of(es)) >= len(events),
                                       what="the watcher saw every mcp_progress event")
            assert [e.data for e in progress_of(seen)] == [e.data for e in events]
        finally:
            await watcher.stop()

    if transport == "http":
        with served(BULKY, "bulky") as server:
            await check(server)
    else:
        await check(stdio(BULKY, "bulky"))


async def test_b14_progress_keeps_a_slow_call_alive_past_its_idle_timeout(
    runtimes: RuntimeFactory,
) -> None:
    rt = await runtimes(
        models=[ScriptedModel(rules=[
            *calling("bulky.steps", {"seconds": 3, "every": 0.3}, when="reporting"),
            *calling("bulky.steps", {"seconds": 3, "every": 0}, when="silent"),
        ])],
        config=RuntimeConfig(mcp_servers=(
            stdio(BULKY, "bulky", timeout=timedelta(seconds=1)),)))
    conv = await conversation(rt, "bulky.steps")

    (reporting,) = await turn(rt, conv, "reporting")
    assert reporting.meta["is_error"] is False, reporting.content
    assert reporting.content.startswith("done after")

    (silent,) = await turn(rt, conv, "silent")
    assert silent.meta["is_error"] is True
    error = json.loads(silent.content)
    assert (error["error"], error["server"], error["tool"]) == (
        "mcp_timeout", "bulky", "steps")
