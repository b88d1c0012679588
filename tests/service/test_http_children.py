"""A2, M16 over HTTP: the requests a conversation opened in its children, and cancelling one --
owner-scoped, unknown task keys and foreign conversations answered as unknown."""

from __future__ import annotations

import functools
from typing import Any

import httpx

from tests.service.conftest import (
    BOB,
    WAIT_S,
    Live,
    assert_problem,
    open_conversation,
    schema_errors,
)
from tests.waiting import eventually
from tidings.records.transcript import ConversationTx


async def _requests(client: httpx.AsyncClient, conv: str) -> list[dict[str, Any]]:
    response = await client.get(f"/v1/conversations/{conv}/children")
    assert response.status_code == 200, response.text
    items = response.json()["items"]
    assert isinstance(items, list)
    return items


async def test_m16_children_are_listed_and_a_queued_request_is_cancelled_over_http(
    live: Live,
) -> None:
    rt = live.runtime
    async with live.client() as alice, live.client(BOB) as bob:
        parent = await open_conversation(alice, tools=("spawn",))
        first = await rt.relay.spawn(parent, "run_host", "call-1", "say hello")
        items = await eventually(functools.partial(_requests, alice, parent),
                                 lambda items: items[0]["relayed"],
                                 what="the child's reply relayed", within_s=WAIT_S, poll_s=0.05)
        (item,) = items
        document = (await alice.get("/openapi.json")).json()
        listing = document["components"]["schemas"]["ChildRequestList"]
        assert schema_errors({"items": items}, listing, document) == []
        assert (item["task_key"], item["kind"], item["state"]) == (
            first.task_key, "spawn", "replied")
        assert item["child_conversation_id"] == first.child_conversation_id
        assert item["owner_run"] is None

        # A relayed reply is owed already: nothing to cancel, and the caller is told so.
        done = await alice.post(f"/v1/conversations/{parent}/children/{first.task_key}/cancel")
        assert done.status_code == 200, done.text
        assert done.json() == {"cancelled": []}

        # A request queued behind a busy child is withdrawn by the cancel.
        def hold(cx: ConversationTx) -> None:
            cx.slot.take("held-by-test", cx.now_us + 60_000_000, rt.instance_id, "run_held")

        await rt.catalog.change(first.child_conversation_id, hold)
        queued = await rt.relay.send(parent, first.child_conversation_id, "run_host", "call-2",
                                     "say it again")
        url = f"/v1/conversations/{parent}/children/{queued.task_key}/cancel"
        assert_problem(await bob.post(url), 404, "unknown_conversation")
        cancelled = await alice.post(url)
        assert cancelled.status_code == 200, cancelled.text
        answer = document["components"]["schemas"]["ChildCancelled"]
        assert schema_errors(cancelled.json(), answer, document) == []
        assert cancelled.json() == {"cancelled": [
            {"task_key": queued.task_key, "child_conversation_id": first.child_conversation_id}
        ]}
        states = [i["state"] for i in await _requests(alice, parent)]
        assert states == ["replied", "cancelled"]

        assert_problem(await alice.post(
            f"/v1/conversations/{parent}/children/child-00000000/cancel"), 404, "unknown_task")
        assert_problem(await bob.get(f"/v1/conversations/{parent}/children"), 404,
                       "unknown_conversation")
        assert_problem(await alice.get(f"/v1/conversations/{parent}/children",
                                       params={"limit": 0}), 422, "invalid_input")
