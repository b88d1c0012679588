"""MCP servers' tools as tools of a runtime, against real servers written with the SDK.

The weather server (tests/mcp_servers/weather.py) runs as a stdio subprocess of the runtime
or over streamable HTTP on loopback; one of its tools exits the whole server in the middle of
the call.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import RuntimeFactory
from tests.mcp_servers import LONG, weather_http, weather_stdio
from tests.waiting import wait_until
from tidings import InvalidInputError, MCPServer, Profile, Rule, ScriptedModel
from tidings.mcp import DISCONNECTS, RECONNECTS, UP
from tidings.runtime.root import Runtime, RuntimeConfig
from tidings.types import Message

WAIT = 60.0


def calling(tool: str, arguments: dict[str, Any], *, when: str) -> list[Rule]:
    """A model that calls ``tool`` when told ``when``, and then says what it read."""
    return [
        Rule(when={"text_equals": when},
             reply={"tool_calls": [{"name": tool, "arguments": arguments}]}),
        Rule(when={"tool_result": tool}, reply={"text": f"{tool} answered"}),
    ]


async def turn(rt: Runtime, conv: str, text: str) -> list[Message]:
    """Post ``text``, wait for the turn, and return the tool results it added."""
    before = len(await rt.transcript(conv))
    await rt.post(conv, text)
    async with asyncio.timeout(WAIT):
        await rt.settle(conv)
    return [m for m in (await rt.transcript(conv))[before:] if m.role == "tool"]


async def weather_runtime(runtimes: RuntimeFactory, server: MCPServer,
                          rules: list[Rule]) -> Runtime:
    return await runtimes(models=[ScriptedModel(rules=rules)],
                          config=RuntimeConfig(mcp_servers=(server,)))


async def conversation(rt: Runtime, *tools: str) -> str:
    created = await rt.create_conversation("alice", Profile(model="scripted", tools=tools))
    return created.conversation_id


def up(rt: Runtime, server: str = "weather") -> float | None:
    return rt.metrics.gauge_value(UP, {"server": server})


async def test_b4_stdio_tools_are_listed_namespaced_and_a_call_reaches_the_transcript(
    runtimes: RuntimeFactory,
) -> None:
    rt = await weather_runtime(runtimes, weather_stdio(),
                               calling("weather.forecast", {"city": "Oslo", "days": 2},
                                       when="forecast?"))
    names = {n for n in rt.tools.names() if n.startswith("weather.")}
    assert names == {"weather.forecast", "weather.conditions", "weather.fail",
                     "weather.crash", "weather.pid", "weather.echo"}
    forecast = rt.tools.get("weather.forecast")
    assert forecast is not None
    assert "forecast" in forecast.description
    assert forecast.parameters["required"] == ["city"]
    assert set(forecast.parameters["properties"]) == {"city", "days"}
    assert up(rt) == 1.0

    conv = await conversation(rt, "weather.forecast")
    (result,) = await turn(rt, conv, "forecast?")
    assert result.tool_name == "weather.forecast"
    assert result.content == "Oslo: sunny for 2 day(s), 21 C"
    assert result.meta["is_error"] is False
    assert (await rt.transcript(conv))[-1].content == "weather.forecast answered"


async def test_b4_structured_content_and_error_results_map_to_tool_results(
    runtimes: RuntimeFactory,
) -> None:
    rt = await weather_runtime(runtimes, weather_stdio(), [
        *calling("weather.conditions", {"city": "Bergen"}, when="now?"),
        *calling("weather.fail", {"city": "Tromso"}, when="fail?"),
        *calling("weather.forecast", {"town": 42}, when="bad arguments?"),
    ])
    conv = await conversation(rt, "weather.conditions", "weather.fail", "weather.forecast")

    (now,) = await turn(rt, conv, "now?")
    assert now.meta["is_error"] is False
    assert json.loads(now.content) == {"city": "Bergen", "temperature_c": 18.5, "sky": "overcast"}
    assert now.meta["structured"] == {"city": "Bergen", "temperature_c": 18.5, "sky": "overcast"}

    (failed,) = await turn(rt, conv, "fail?")
    assert failed.meta["is_error"] is True
    assert "the weather station of Tromso is down" in failed.content

    (refused,) = await turn(rt, conv, "bad arguments?")
    assert refused.meta["is_error"] is True
    assert "city" in refused.content  # the server says which argument is missing
    assert up(rt) == 1.0  # a tool's error is not the connection's


async def test_b4_a_streamable_http_server_on_loopback(runtimes: RuntimeFactory) -> None:
    with weather_http() as server:
        rt = await weather_runtime(runtimes, server,
                                   calling("weather.forecast", {"city": "Lima"}, when="go"))
        conv = await conversation(rt, "weather.forecast")
        (result,) = await turn(rt, conv, "go")
        assert result.content == "Lima: sunny for 1 day(s), 21 C"
        assert result.meta["is_error"] is False
        assert up(rt) == 1.0


async def test_b4_a_server_that_crashes_mid_call_answers_a_typed_error_and_comes_back(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    marker = tmp_path / "crash-once"
    marker.touch()
    server = weather_stdio(env={"WEATHER_CRASH_MARKER": str(marker)})
    rt = await weather_runtime(runtimes, server, [
        *calling("weather.crash", {"city": "Oslo"}, when="crash"),
        *calling("weather.forecast", {"city": "Oslo"}, when="later"),
    ])
    conv = await conversation(rt, "weather.crash", "weather.forecast")

    (crashed,) = await turn(rt, conv, "crash")
    assert not marker.exists()  # the server did exit in the middle of the call
    assert crashed.meta["is_error"] is True
    error = json.loads(crashed.content)
    assert error["error"] == "mcp_unavailable"
    assert (error["server"], error["tool"]) == ("weather", "crash")
    assert "broke during the call" in error["reason"]

    # Reconnected with backoff (a new subprocess): a later call works.
    await wait_until(lambda: rt.metrics.counter_value(RECONNECTS, {"server": "weather"}) >= 1,
                     what="the weather server reconnected")
    assert rt.metrics.counter_value(DISCONNECTS, {"server": "weather"}) == 1
    assert up(rt) == 1.0
    (later,) = await turn(rt, conv, "later")
    assert later.content == "Oslo: sunny for 1 day(s), 21 C"
    exposition = rt.metrics.render()
    assert 'tidings_mcp_server_up{server="weather"} 1.0' in exposition
    assert 'tidings_mcp_reconnects_total{server="weather"} 1.0' in exposition


async def test_b4_while_a_server_is_down_its_tools_answer_a_typed_error(
    runtimes: RuntimeFactory, tmp_path: Path,
) -> None:
    marker = tmp_path / "crash-once"
    marker.touch()
    server = weather_stdio(env={"WEATHER_CRASH_MARKER": str(marker)}, reconnect_base=LONG,
                           reconnect_cap=LONG)
    rt = await weather_runtime(runtimes, server, [
        *calling("weather.crash", {"city": "Oslo"}, when="crash"),
        *calling("weather.forecast", {"city": "Oslo"}, when="meanwhile"),
    ])
    conv = await conversation(rt, "weather.crash", "weather.forecast")
    await turn(rt, conv, "crash")
    await wait_until(lambda: up(rt) == 0.0, what="the weather server is down")

    (meanwhile,) = await turn(rt, conv, "meanwhile")
    assert meanwhile.meta["is_error"] is True
    error = json.loads(meanwhile.content)
    assert (error["error"], error["server"], error["tool"]) == (
        "mcp_unavailable", "weather", "forecast")
    assert error["reason"]
    assert 'tidings_mcp_server_up{server="weather"} 0.0' in rt.metrics.render()


async def test_b4_a_server_that_cannot_start_is_retried_and_reported(
    runtimes: RuntimeFactory,
) -> None:
    broken = MCPServer("broken", command=["/nonexistent/mcp-server"], reconnect_base=LONG,
                       reconnect_cap=LONG)
    rt = await runtimes(models=[ScriptedModel(rules=[])],
                        config=RuntimeConfig(mcp_servers=(broken,)))
    assert up(rt, "broken") == 0.0
    assert not [n for n in rt.tools.names() if n.startswith("broken.")]
    output = await rt.mcp["broken"].call("anything", {})
    assert output.is_error
    assert json.loads(output.content)["error"] == "mcp_unavailable"


async def test_b4_closing_the_runtime_ends_the_server_process(backend: Any) -> None:
    async with Runtime.open(backend.url, models=[ScriptedModel(rules=[])],
                            mcp_servers=[weather_stdio()]) as rt:
        output = await rt.mcp["weather"].call("pid", {})
        pid = int(output.content)
        os.kill(pid, 0)  # running
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_b4_a_declaration_names_one_transport() -> None:
    with pytest.raises(InvalidInputError, match="exactly one of command"):
        MCPServer("both", command=["x"], url="http://127.0.0.1:1/mcp")
    with pytest.raises(InvalidInputError, match="exactly one of command"):
        MCPServer("neither")
    with pytest.raises(InvalidInputError, match="name"):
        MCPServer("has.dot", command=["x"])
    assert MCPServer("w", command="python", args=["-m", "w"]).command == ("python", "-m", "w")
