"""A2, R2: bearer-token principals. No token, no answer; a principal sees only its own
conversations, and another's answers exactly like an id that never existed."""

from __future__ import annotations

import re
from typing import Any

import httpx

from tests.service.conftest import (
    ALICE,
    BOB,
    OPERATOR,
    Live,
    assert_problem,
    open_conversation,
)

PUBLIC = {"/health", "/openapi.json"}
NEVER = "conv_00000000000000000000000000000000"  # well formed, never issued

# Every conversation route, with a body where it takes one.
CONVERSATION_ROUTES: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", "/v1/conversations/{c}", None),
    ("POST", "/v1/conversations/{c}/archive", None),
    ("DELETE", "/v1/conversations/{c}", None),
    ("POST", "/v1/conversations/{c}/inputs", {"content": "let me in"}),
    ("GET", "/v1/conversations/{c}/inputs", None),
    ("PUT", "/v1/conversations/{c}/goal", {"status": "active", "text": "take over"}),
    ("POST", "/v1/conversations/{c}/goal/checkpoint", None),
    ("GET", "/v1/conversations/{c}/transcript", None),
    ("GET", "/v1/conversations/{c}/runs", None),
    ("GET", "/v1/conversations/{c}/runs/{run}", None),
    ("POST", "/v1/conversations/{c}/stop", None),
    ("POST", "/v1/conversations/{c}/compact", None),
    ("GET", "/v1/conversations/{c}/tasks", None),
    ("GET", "/v1/conversations/{c}/tasks/{task}", None),
    ("GET", "/v1/conversations/{c}/results", None),
    ("GET", "/v1/conversations/{c}/results/{result}", None),
    ("GET", "/v1/conversations/{c}/signals/stats", None),
    ("GET", "/v1/conversations/{c}/dead-letters", None),
    ("GET", "/v1/conversations/{c}/events", None),
    ("GET", "/v1/conversations/{c}/events.json", None),
]


def _scrub(text: str, *ids: str) -> str:
    for value in ids:
        text = text.replace(value, "<id>")
    return text


async def test_a2_every_route_but_health_and_schema_needs_a_token(live: Live) -> None:
    async with live.client(None) as anonymous:
        paths = (await anonymous.get("/openapi.json")).json()["paths"]
        assert (await anonymous.get("/health")).status_code == 200
        checked = 0
        for path, operations in paths.items():
            if path in PUBLIC:
                continue
            url = re.sub(r"\{[^}]+\}", "conv_x", path)
            for method in operations:
                for headers in ({}, {"Authorization": "Bearer not-a-token"},
                                {"Authorization": f"Basic {ALICE}"}):
                    response = await anonymous.request(method.upper(), url, headers=headers)
                    assert_problem(response, 401, "unauthorized")
                    assert response.headers["www-authenticate"].startswith("Bearer")
                checked += 1
        assert checked >= len(CONVERSATION_ROUTES) + 4  # + list, create, operator views, metrics


async def test_a2_another_principals_conversation_answers_like_an_unknown_one(
    live: Live,
) -> None:
    async with live.client(ALICE) as alice, live.client(BOB) as bob:
        conv = await open_conversation(alice)
        await alice.post(f"/v1/conversations/{conv}/inputs", json={"content": "private"})
        await live.runtime.settle(conv)
        [run] = (await alice.get(f"/v1/conversations/{conv}/runs")).json()["items"]
        result = await live.runtime.keyring.results().put(conv, b"alice's secret output")
        before = (await alice.get(f"/v1/conversations/{conv}/events.json")).json()

        for method, template, body in CONVERSATION_ROUTES:
            answers: list[httpx.Response] = []
            for target in (conv, NEVER):
                url = template.format(c=target, run=run["run_id"], task="t-1",
                                      result=result.result_id)
                answers.append(await bob.request(method, url, json=body))
            foreign, unknown = answers
            assert_problem(foreign, 404, "unknown_conversation")
            assert foreign.status_code == unknown.status_code, (method, template)
            assert _scrub(foreign.text, conv) == _scrub(unknown.text, NEVER), (method, template)
            assert foreign.headers["content-type"] == unknown.headers["content-type"]
            assert foreign.headers["content-length"] == unknown.headers["content-length"]

        # Bob's attempts changed nothing of Alice's.
        after = (await alice.get(f"/v1/conversations/{conv}/events.json")).json()
        assert after == before
        mine = (await alice.get(f"/v1/conversations/{conv}")).json()
        assert (mine["status"], mine["goal_status"]) == ("active", "none")
        assert len((await alice.get(f"/v1/conversations/{conv}/inputs")).json()["items"]) == 1
        # A run id is no way in either, even through Bob's own conversation.
        own = await open_conversation(bob)
        assert_problem(await bob.get(f"/v1/conversations/{own}/runs/{run['run_id']}"), 404,
                       "unknown_run")


async def test_r2_a_foreign_result_answers_like_an_unknown_one(live: Live) -> None:
    async with live.client(ALICE) as alice, live.client(BOB) as bob:
        conv = await open_conversation(alice)
        theirs = await open_conversation(bob)
        secret = await live.runtime.keyring.results().put(conv, b"alice's secret output")
        never = "res_00000000000000000000000000000000"

        page = await alice.get(f"/v1/conversations/{conv}/results/{secret.result_id}")
        assert page.json()["text"] == "alice's secret output"
        foreign = await bob.get(f"/v1/conversations/{theirs}/results/{secret.result_id}")
        unknown = await bob.get(f"/v1/conversations/{theirs}/results/{never}")
        assert_problem(foreign, 404, "unknown_result")
        assert _scrub(foreign.text, secret.result_id) == _scrub(unknown.text, never)
        assert (await bob.get(f"/v1/conversations/{theirs}/results")).json()["items"] == []
        # Alice's own other conversation does not see it either: scope is the conversation.
        other = await open_conversation(alice)
        assert_problem(await alice.get(f"/v1/conversations/{other}/results/{secret.result_id}"),
                       404, "unknown_result")


async def test_a2_operator_views_need_an_operator_token(live: Live) -> None:
    async with live.client(ALICE) as alice, live.client(OPERATOR) as operator:
        conv = await open_conversation(alice)
        for path in ("/v1/signals/stats", "/v1/dead-letters", "/metrics"):
            assert_problem(await alice.get(path), 403, "forbidden")
            assert (await operator.get(path)).status_code == 200
        totals = (await operator.get("/v1/signals/stats")).json()
        assert totals["conversation_id"] is None
        # An operator token is not a principal: it opens no conversation, but reads every one
        # -- and not the output its results hold, which is the owner's.
        assert_problem(await operator.post("/v1/conversations",
                                           json={"profile": {"model": "scripted"}}),
                       403, "forbidden")
        assert (await operator.get(f"/v1/conversations/{conv}")).json()["owner"] == "alice"
        listed = (await operator.get("/v1/conversations")).json()["items"]
        assert [c["conversation_id"] for c in listed] == [conv]
        assert_problem(await operator.get(f"/v1/conversations/{conv}/results"), 403,
                       "forbidden")
        # A principal reads its own conversation's figures.
        stats = (await alice.get(f"/v1/conversations/{conv}/signals/stats")).json()
        assert (stats["conversation_id"], stats["backlog"]) == (conv, 0)
        assert (await alice.get(f"/v1/conversations/{conv}/dead-letters")).json() == {
            "items": []}
