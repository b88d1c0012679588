"""L5 and B2 over HTTP: a run holding on an undecided call reads ``awaiting_approval`` (the
OpenAPI document names the status), and the feed (SSE) says so, then ``running`` again once
the person decides, then the run's end."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.scenarios.test_awaiting_approval import MODEL, Deploys
from tests.service.conftest import KEY, WAIT_S, Servers
from tests.service.test_http_sse import Received, sse
from tidings.runtime.root import Runtime


async def _held(runtime: Runtime, conv: str) -> str:
    held = await asyncio.wait_for(runtime.settle(conv), WAIT_S)
    assert [r.status.value for r in held] == ["awaiting_approval"]
    return held[0].run_id


def _status(event: Received) -> str | None:
    if event.event != "turn_status":
        return None
    data: dict[str, Any] = event.data["data"]
    return str(data["status"])


async def test_l5_awaiting_approval_http_run_reads_and_feed_show_the_hold(
    servers: Servers,
) -> None:
    deploys = Deploys()
    runtime = await servers.runtimes(models=[MODEL], tools=[deploys.tool()], master_key=KEY)
    live = await servers(runtime)
    async with live.client() as alice:
        schema = (await alice.get("/openapi.json")).json()
        status = schema["components"]["schemas"]["RunOut"]["properties"]["status"]
        enum = schema["components"]["schemas"][status["$ref"].rsplit("/", 1)[1]]["enum"] \
            if "$ref" in status else status["enum"]
        assert "awaiting_approval" in enum

        created = await alice.post("/v1/conversations", json={"profile": {
            "model": "scripted", "tools": ["deploy"], "approval_mode": "writes"}})
        conv = created.json()["conversation_id"]
        base = f"/v1/conversations/{conv}"
        statuses: list[str] = []
        async with asyncio.timeout(WAIT_S), alice.stream("GET", f"{base}/events") as stream:
            assert stream.status_code == 200
            events = sse(stream)
            posted = await alice.post(f"{base}/inputs", json={"content": "deploy it"})
            assert posted.status_code == 202, posted.text
            async for event in events:
                if (found := _status(event)) is not None:
                    statuses.append(found)
                if found == "awaiting_approval":
                    break
            run_id = await _held(runtime, conv)
            [listed] = (await alice.get(f"{base}/runs")).json()["items"]
            assert (listed["run_id"], listed["status"]) == (run_id, "awaiting_approval")
            one = (await alice.get(f"{base}/runs/{run_id}")).json()
            assert one["status"] == "awaiting_approval"

            [approval] = (await alice.get(f"{base}/approvals",
                                          params={"status": "pending"})).json()["approvals"]
            decided = await alice.post(
                f"{base}/approvals/{approval['approval_id']}/decision", json={"approve": True})
            assert decided.status_code == 200, decided.text
            async for event in events:
                if (found := _status(event)) is not None:
                    statuses.append(found)
                if found == "completed":
                    break
        assert statuses == ["running", "awaiting_approval", "running", "completed"]
        assert (await alice.get(f"{base}/runs/{run_id}")).json()["status"] == "completed"
        assert deploys.applied == [{"target": "prod"}]
