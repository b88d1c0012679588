"""B18: a server that refuses tidings' credentials (HTTP 401 or 403) is said to be so, once --
in the log and in the feed of each conversation that called it, with what to do -- its tools
answer ``mcp_unavailable`` with that reason, and it is asked again only at the reconnect cap,
never hammered.

Against tests/mcp_servers/gated.py: the SDK's streamable HTTP app behind a gate that refuses
every request while a file says so, and counts them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from tests.conftest import RuntimeFactory
from tests.mcp_servers.loopback import GATED, served
from tests.scenarios.test_b4_mcp import calling, conversation, turn, up
from tests.waiting import wait_until
from tidings import MCPServer, ScriptedModel
from tidings.runtime.root import RuntimeConfig

CAP = timedelta(seconds=1.5)
WATCHED_S = 2.0
STATUS = {401: "unauthorized", 403: "forbidden"}


def requests(log: Path) -> list[tuple[float, str, str]]:
    """The gate's requests so far: ``(monotonic time, method, status or "passed")``."""
    if not log.exists():
        return []
    rows = [line.split() for line in log.read_text().splitlines() if line.strip()]
    return [(float(at), method, status) for at, method, status in rows]


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[tuple[MCPServer, Path, Path]]:
    refuse, log = tmp_path / "refuse", tmp_path / "requests.log"
    with served(GATED, "gated", env={"GATED_REFUSE": str(refuse), "GATED_LOG": str(log)},
                reconnect_base=timedelta(milliseconds=20), reconnect_cap=CAP) as server:
        yield server, refuse, log


@pytest.mark.parametrize("status", [401, 403])
async def test_b18_a_refusal_is_said_once_in_the_log_and_the_feed_and_not_hammered(
    runtimes: RuntimeFactory, gate: tuple[MCPServer, Path, Path], status: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "tidings.mcp")
    server, refuse, log = gate
    rt = await runtimes(
        models=[ScriptedModel(rules=calling("gated.hello", {"name": "Ada"}, when="hello?"))],
        config=RuntimeConfig(mcp_servers=(server,)))
    conv = await conversation(rt, "gated.hello")
    (works,) = await turn(rt, conv, "hello?")  # the conversation uses the server
    assert (works.meta["is_error"], works.content) == (False, "hello Ada")

    refuse.write_text(str(status))  # the credentials are refused from now on
    (refused,) = await turn(rt, conv, "hello?")
    assert refused.meta["is_error"] is True
    error = json.loads(refused.content)
    assert (error["error"], error["server"], error["tool"]) == (
        "mcp_unavailable", "gated", "hello")
    assert f"HTTP {status}" in error["reason"]
    await wait_until(lambda: up(rt, "gated") == 0.0, what="the gated server is down")

    # Watched for a while: asked again at the cap's pace, not at the backoff's base.
    first = next(at for at, _, said in requests(log) if said == str(status))
    await asyncio.sleep(WATCHED_S)
    elapsed = time.monotonic() - first  # the gate's clock is this machine's monotonic one
    since = [r for r in requests(log) if r[0] >= first]
    # The refused call, then one attempt per cap (an attempt is the SDK's handshake: at most
    # two requests). At the backoff's base (20 ms) it would be a hundred.
    attempts = 2 + elapsed / CAP.total_seconds()
    assert len(since) <= 2 * attempts, (elapsed, since)

    # Meanwhile its tools answer why.
    (meanwhile,) = await turn(rt, conv, "hello?")
    error = json.loads(meanwhile.content)
    assert error["error"] == "mcp_unavailable"
    assert f"HTTP {status}" in error["reason"]

    # Said once: one error in the log, naming the status and what to do.
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, errors
    assert f"HTTP {status}" in errors[0]
    assert "restart" in errors[0]
    # And one event in the feed of the conversation that called it.
    events = [e.data for e in await rt.events(conv) if e.type == "mcp_server_status"]
    assert len(events) == 1, events
    (said,) = events
    assert (said["server"], said["status"], said["http_status"]) == (
        "gated", STATUS[status], status)
    assert f"HTTP {status}" in said["reason"]
    # A conversation that never called it is not told.
    other = await conversation(rt, "gated.hello")
    assert [e for e in await rt.events(other) if e.type == "mcp_server_status"] == []

    # Let in again: connected at the next try, and the conversation told so.
    refuse.unlink()
    await wait_until(lambda: up(rt, "gated") == 1.0, what="the gated server is back",
                     within_s=30)
    (back,) = await turn(rt, conv, "hello?")
    assert back.content == "hello Ada"
    statuses = [e.data["status"] for e in await rt.events(conv)
                if e.type == "mcp_server_status"]
    assert statuses == [STATUS[status], "connected"]
