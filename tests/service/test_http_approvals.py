"""L5 and L2 over HTTP: a held tool call is listed and decided by its owner only; a restart is
answered "accepted, not completed"."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Mapping
from typing import Any

from tests.conftest import Backend
from tests.service.conftest import BOB, KEY, OPERATOR, Servers, assert_problem
from tidings.models.scripted import Rule, ScriptedModel
from tidings.runtime.root import Runtime
from tidings.tools.registry import Tool, ToolContext, ToolOutput

KEY_HEX = secrets.token_hex(32)

MODEL = ScriptedModel(
    rules=[
        Rule({"tool_result": "deploy"}, {"text": "deploy handled"}),
        Rule({"text_contains": "deploy"},
             {"tool_calls": [{"name": "deploy", "arguments": {"target": "prod"}}]}),
    ],
    default={"text": "ok"},
)


async def test_l5_http_lists_and_decides_a_held_call_once(servers: Servers) -> None:
    applied: list[Mapping[str, Any]] = []

    async def deploy(context: ToolContext, arguments: Mapping[str, Any]) -> ToolOutput:
        applied.append(arguments)
        return ToolOutput("deployed")

    runtime = await servers.runtimes(models=[MODEL], tools=[Tool("deploy", "Deploy.", deploy)],
                                     master_key=KEY)
    live = await servers(runtime)
    async with live.client() as alice, live.client(BOB) as bob:
        created = await alice.post("/v1/conversations", json={"profile": {
            "model": "scripted", "tools": ["deploy"], "approval_mode": "writes"}})
        assert created.status_code == 201, created.text
        assert created.json()["profile"]["automatic_tools"] == "read_only"
        conv = created.json()["conversation_id"]
        await alice.post(f"/v1/conversations/{conv}/inputs", json={"content": "deploy now"})
        for _ in range(500):
            if await runtime.approvals.list(conv, status="pending"):
                break
            await asyncio.sleep(0.01)
        listed = await alice.get(f"/v1/conversations/{conv}/approvals",
                                 params={"status": "pending"})
        pending = listed.json()["approvals"]
        [approval] = pending
        assert approval["tool_name"] == "deploy"
        url = f"/v1/conversations/{conv}/approvals/{approval['approval_id']}/decision"
    async with live.client() as alice, live.client(BOB) as bob:

        # Another principal: the same 404 as an unknown id, and nothing decided.
        assert_problem(await bob.post(url, json={"approve": True}), 404, "unknown_conversation")
        assert_problem(await bob.get(f"/v1/conversations/{conv}/approvals"), 404,
                       "unknown_conversation")

        decided = await asyncio.gather(*(alice.post(url, json={"approve": True})
                                         for _ in range(3)))
        assert all(r.status_code == 200 for r in decided), [r.text for r in decided]
        assert decided[0].json()["decided_by"] == "alice"
        for _ in range(500):
            if applied:
                break
            await asyncio.sleep(0.01)
        assert applied == [{"target": "prod"}]
        late = await alice.post(url, json={"approve": False})
        assert_problem(late, 409, "approval_decided")
        listed_after = (await alice.get(f"/v1/conversations/{conv}/approvals")).json()
        [after] = [a for a in listed_after["approvals"]
                   if a["approval_id"] == approval["approval_id"]]
        assert after["status"] == "applied"


async def test_l2_http_restart_is_accepted_not_completed(servers: Servers) -> None:
    live = await servers()
    async with live.client() as alice, live.client(BOB) as bob:
        created = await alice.post("/v1/conversations", json={"profile": {"model": "scripted"}})
        conv = created.json()["conversation_id"]
        assert_problem(await bob.post(f"/v1/conversations/{conv}/restart", json={}), 404,
                       "unknown_conversation")
        accepted = await alice.post(f"/v1/conversations/{conv}/restart",
                                    json={"reason": "new config"})
        assert accepted.status_code == 202, accepted.text
        body = accepted.json()
        assert (body["status"], body["completed"]) == ("accepted", False)
        assert live.runtime.restart_requested.is_set()
        events = (await alice.get(f"/v1/conversations/{conv}/events.json")).json()
        kinds = [e["type"] for e in events["items"]]
        assert "restart_accepted" in kinds


async def test_c8_http_retry_names_a_model_and_is_owner_scoped(servers: Servers) -> None:
    live = await servers()
    async with live.client() as alice, live.client(BOB) as bob:
        created = await alice.post("/v1/conversations", json={"profile": {"model": "scripted"}})
        conv = created.json()["conversation_id"]
        await alice.post(f"/v1/conversations/{conv}/inputs", json={"content": "hi"})
        await live.runtime.settle(conv)
        [run] = (await alice.get(f"/v1/conversations/{conv}/runs")).json()["items"]
        url = f"/v1/conversations/{conv}/runs/{run['run_id']}/retry"
        # A completed run is not retried; a stranger learns nothing; a bad body is refused.
        assert_problem(await alice.post(url, json={}), 422, "invalid_input")
        assert_problem(await bob.post(url, json={}), 404, "unknown_conversation")
        assert_problem(await alice.post(url, json={"model": "x", "origin": "task_result"}),
                       422, "origin_not_allowed")
        inputs = (await alice.get(f"/v1/conversations/{conv}/inputs")).json()["items"]
        assert len(inputs) == 1
        # Stopping the completed run (M14) is allowed and changes what it published nothing.
        stop = f"/v1/conversations/{conv}/runs/{run['run_id']}/stop"
        assert_problem(await bob.post(stop), 404, "unknown_conversation")
        stopped = await alice.post(stop)
        assert stopped.status_code == 200, stopped.text
        assert stopped.json() == {"cancelled_inputs": []}
        assert_problem(await alice.post(f"/v1/conversations/{conv}/runs/run_nope/stop"), 404,
                       "unknown_run")


async def test_l1_http_a_locked_server_refuses_work_until_an_operator_unlocks_it(
    servers: Servers, backend: Backend,
) -> None:
    async with Runtime.open(backend.url, models=[MODEL], locked=True) as runtime:
        live = await servers(runtime)
        async with live.client() as alice, live.client(OPERATOR) as operator, \
                live.client(None) as anonymous:
            health = (await anonymous.get("/health")).json()
            assert health["status"] == "locked"
            assert_problem(await alice.post("/v1/conversations",
                                            json={"profile": {"model": "scripted"}}),
                           503, "runtime_locked")  # creating is a mutation too
            assert_problem(await alice.post("/v1/unlock", json={"master_key": KEY_HEX}), 403,
                           "forbidden")
            assert_problem(await operator.post("/v1/unlock", json={"master_key": "nope"}), 422,
                           "invalid_input")
            assert (await anonymous.get("/health")).json()["status"] == "locked"
            unlocked = await operator.post("/v1/unlock", json={"master_key": KEY_HEX})
            assert unlocked.status_code == 200, unlocked.text
            assert unlocked.json()["status"] == "ok"
            created = await alice.post("/v1/conversations",
                                       json={"profile": {"model": "scripted"}})
            assert created.status_code == 201
            conv = created.json()["conversation_id"]
            posted = await alice.post(f"/v1/conversations/{conv}/inputs", json={"content": "hi"})
            assert posted.status_code == 202
            await runtime.settle(conv)
            transcript = (await alice.get(f"/v1/conversations/{conv}/transcript")).json()
            assert [m["role"] for m in transcript["items"]] == ["user", "assistant"]
        await live.stop()
