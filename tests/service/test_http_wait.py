"""B2 over HTTP: ``POST /v1/conversations/{id}/inputs?wait=<seconds>`` answers 200 with the
input, the run that read it and its reply once the run ends or holds for a person; a timeout
answers as things stand (``timed_out``) and the input stays accepted; bad values are a typed
422; another principal's conversation looks unknown."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from tests.scenarios.test_ask_and_wait import Held
from tests.service.conftest import (
    ALICE,
    BOB,
    KEY,
    WAIT_S,
    Live,
    Servers,
    assert_problem,
    open_conversation,
)
from tests.service.test_http_openapi import Documented
from tests.waiting import wait_until

INPUTS = "/v1/conversations/{conversation_id}/inputs"


def inputs(conv: str) -> str:
    return f"/v1/conversations/{conv}/inputs"


async def held_server(servers: Servers) -> tuple[Live, Held]:
    """A server whose model holds a turn told "hold" until the test opens its gate."""
    model = Held()
    runtime = await servers.runtimes(models=[model], master_key=KEY)
    return await servers(runtime), model


async def test_b2_http_wait_answers_with_the_run_and_its_reply(live: Live) -> None:
    async with live.client(ALICE) as alice:
        documented = Documented((await alice.get("/openapi.json")).json())
        conv = await open_conversation(alice)

        response = await alice.post(inputs(conv), params={"wait": 10},
                                    json={"content": "hello there"})

        assert response.status_code == 200, response.text
        documented.check(response, INPUTS)
        answer: dict[str, Any] = response.json()
        assert answer["status"] == "completed"
        assert answer["timed_out"] is False
        assert answer["reply"] == "hello there"
        run = answer["run"]
        assert run["status"] == "completed"
        assert run["model"] == "scripted"
        assert answer["input"]["content"] == "hello there"
        assert answer["input"]["state"] == "materialized"
        assert answer["input"]["run_id"] == run["run_id"]
        [listed] = (await alice.get(f"/v1/conversations/{conv}/runs")).json()["items"]
        assert listed == run
        # Without ?wait= the post is what it was: 202 and the input.
        plain = await alice.post(inputs(conv), json={"content": "again"})
        assert plain.status_code == 202
        documented.check(plain, INPUTS)
        assert plain.json()["content"] == "again"


async def test_b2_http_wait_times_out_as_it_stands_and_the_input_is_answered_later(
    servers: Servers,
) -> None:
    live, model = await held_server(servers)
    async with live.client(ALICE) as alice:
        documented = Documented((await alice.get("/openapi.json")).json())
        conv = await open_conversation(alice)

        running = await alice.post(inputs(conv), params={"wait": 0.2},
                                   json={"content": "hold on", "idempotency_key": "k1"})
        queued = await alice.post(inputs(conv), params={"wait": "0.2"},
                                  json={"content": "behind it", "idempotency_key": "k2"})

        for response in (running, queued):
            assert response.status_code == 200, response.text
            documented.check(response, INPUTS)
        first, second = running.json(), queued.json()
        assert first["timed_out"] is True
        assert first["status"] == "running"  # its turn took it and runs
        assert first["run"]["status"] == "running"
        assert first["reply"] is None
        assert second["timed_out"] is True
        assert second["status"] == "queued"  # it waits behind that turn: no run has it yet
        assert second["run"] is None
        assert second["input"]["state"] == "queued"

        model.gate.set()
        again = await alice.post(inputs(conv), params={"wait": 20},
                                 json={"content": "behind it", "idempotency_key": "k2"})
        assert again.status_code == 200
        answered = again.json()
        assert answered["input"]["input_id"] == second["input"]["input_id"]
        assert answered["status"] == "completed"
        assert answered["timed_out"] is False
        assert answered["reply"] == "behind it"
        assert answered["run"]["run_id"] != first["run"]["run_id"]
        listed = (await alice.get(inputs(conv))).json()["items"]
        assert [(i["content"], i["state"]) for i in listed] == [
            ("hold on", "materialized"), ("behind it", "materialized")]


async def test_b2_http_bad_wait_values_are_refused_before_anything_is_written(
    live: Live,
) -> None:
    async with live.client(ALICE) as alice:
        documented = Documented((await alice.get("/openapi.json")).json())
        conv = await open_conversation(alice)
        for bad in ("0", "-1", "300.5", "301", "nan", "inf", "abc", ""):
            response = await alice.post(f"{inputs(conv)}?wait={bad}", json={"content": "hi"})
            body = assert_problem(response, 422, "invalid_input")
            documented.check(response, INPUTS)
            assert [e["loc"] for e in body["errors"]] == [["query", "wait"]], bad
        assert (await alice.get(inputs(conv))).json()["items"] == []
        at_most = await alice.post(inputs(conv), params={"wait": 300}, json={"content": "hi"})
        assert at_most.status_code == 200  # the bound itself is allowed
        assert at_most.json()["reply"] == "hi"


async def test_b2_http_another_principal_cannot_wait_on_a_foreign_conversation(
    live: Live,
) -> None:
    async with live.client(ALICE) as alice, live.client(BOB) as bob:
        conv = await open_conversation(alice)
        foreign = await bob.post(inputs(conv), params={"wait": 5}, json={"content": "let me in"})
        unknown = await bob.post(inputs("conv_nobody"), params={"wait": 5},
                                 json={"content": "let me in"})
        assert_problem(foreign, 404, "unknown_conversation")
        assert foreign.status_code == unknown.status_code
        assert foreign.json()["detail"].replace(conv, "X") == (
            unknown.json()["detail"].replace("conv_nobody", "X"))
        assert (await alice.get(inputs(conv))).json()["items"] == []  # nothing was written


async def test_b2_http_a_server_shutting_down_answers_its_waits_as_they_stand(
    servers: Servers,
) -> None:
    live, model = await held_server(servers)
    async with live.client(ALICE) as alice:
        conv = await open_conversation(alice)
        waiting = asyncio.create_task(
            alice.post(inputs(conv), params={"wait": 300}, json={"content": "hold still"}))
        await wait_until(lambda: live.runtime.answers.waiting == 1, what="the post waits")
        await live.stop()  # graceful: the open request is answered before the server ends
        response = await asyncio.wait_for(waiting, WAIT_S)
    assert response.status_code == 200
    assert response.json()["timed_out"] is True
    assert response.json()["status"] == "running"
    model.gate.set()


async def test_b2_http_a_client_that_leaves_ends_its_wait(servers: Servers) -> None:
    live, model = await held_server(servers)
    async with live.client(ALICE) as alice:
        conv = await open_conversation(alice)
    async with httpx.AsyncClient(base_url=live.url, headers={"Authorization": f"Bearer {ALICE}"},
                                 timeout=httpx.Timeout(WAIT_S, read=0.5)) as impatient:
        try:
            await impatient.post(inputs(conv), params={"wait": 300},
                                 json={"content": "hold forever"})
        except httpx.ReadTimeout:
            pass  # it hangs up
        else:
            raise AssertionError("the held turn answered")
    await wait_until(lambda: live.runtime.answers.waiting == 0,
                     what="the server noticed the client left")
    model.gate.set()
