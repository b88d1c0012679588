"""A2, T2, T10, R2, R3: a background task's facts and its sealed output over HTTP -- owner-scoped,
paged in bytes, untrusted bytes given as text with invalid UTF-8 replaced."""

from __future__ import annotations

from typing import Any

import httpx

from tests.service.conftest import BOB, WAIT_S, Live, assert_problem, open_conversation
from tests.waiting import eventually


async def _settled_task(client: httpx.AsyncClient, conv: str) -> dict[str, Any]:
    """The conversation's one task, once it ended and its notification was consumed."""

    async def tasks() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = (
            await client.get(f"/v1/conversations/{conv}/tasks")).json()["items"]
        return items

    [task] = await eventually(
        tasks, lambda items: items and items[0]["state"] != "running" and items[0]["consumed"],
        what="the task ended and its notification consumed", within_s=WAIT_S, poll_s=0.05)
    assert isinstance(task, dict)
    return task


async def test_t10_task_facts_and_its_result_pages_over_http(live: Live) -> None:
    async with live.client() as alice, live.client(BOB) as bob:
        conv = await open_conversation(alice, tools=("shell",))
        posted = await alice.post(f"/v1/conversations/{conv}/inputs",
                                  json={"content": "please run in the background"})
        assert posted.status_code == 202
        task = await _settled_task(alice, conv)
        assert (task["state"], task["exit_code"], task["signal"]) == ("exited", 3, None)
        assert (task["delivered"], task["committed"], task["cancelled"]) == (True, True, False)
        assert task["stdout_bytes"] == len(b"bad \xff byte")
        assert "bad \ufffd byte" in task["excerpt"]  # the invalid byte, replaced
        assert task["result_id"] is not None
        key = task["task_key"]
        assert (await alice.get(f"/v1/conversations/{conv}/tasks/{key}")).json() == task

        first = (await alice.get(f"/v1/conversations/{conv}/tasks", params={"limit": 1})).json()
        assert first["next_before_us"] == task["started_at_us"]
        rest = await alice.get(f"/v1/conversations/{conv}/tasks",
                               params={"before_us": first["next_before_us"]})
        assert rest.json() == {"items": [], "next_before_us": None}

        [ref] = (await alice.get(f"/v1/conversations/{conv}/results")).json()["items"]
        assert (ref["result_id"], ref["task_key"], ref["lifetime"]) == (
            task["result_id"], key, "durable")
        # Paged in bytes (R3): four at a time, each page decoded on its own.
        texts, offset = [], 0
        while offset is not None:
            page = (await alice.get(f"/v1/conversations/{conv}/results/{ref['result_id']}",
                                    params={"offset": offset, "limit_bytes": 4})).json()
            assert page["size_bytes"] == ref["size_bytes"]
            texts.append(page["text"])
            offset = page["next_offset"]
        assert "".join(texts).startswith("bad \ufffd byte")
        assert_problem(await alice.get(f"/v1/conversations/{conv}/results/{ref['result_id']}",
                                       params={"offset": 10**6}), 422, "invalid_input")

        # Bob learns nothing: not the task, not the result, not that they exist (R2).
        theirs = await open_conversation(bob)
        for url, unknown, code in (
            (f"/v1/conversations/{theirs}/tasks/{key}",
             f"/v1/conversations/{theirs}/tasks/never", "unknown_task"),
            (f"/v1/conversations/{theirs}/results/{ref['result_id']}",
             f"/v1/conversations/{theirs}/results/res_never", "unknown_result"),
        ):
            foreign = await bob.get(url)
            assert_problem(foreign, 404, code)
            missing = await bob.get(unknown)
            secret = url.rsplit("/", 1)[1]
            never = unknown.rsplit("/", 1)[1]
            assert foreign.text.replace(secret, "<id>") == missing.text.replace(never, "<id>")
        assert_problem(await bob.get(f"/v1/conversations/{conv}/tasks/{key}"), 404,
                       "unknown_conversation")
        assert (await bob.get(f"/v1/conversations/{theirs}/tasks")).json()["items"] == []


async def test_h1_a_task_notice_is_listed_by_get_inputs_and_announced_in_the_feed(
    live: Live,
) -> None:
    """Over HTTP, a background task's notice is an input like any other: listed by GET inputs
    with its kernel origin and stamps, announced by ``input_accepted`` in the feed, and named
    by the run it woke."""
    async with live.client() as alice:
        conv = await open_conversation(alice, tools=("shell",))
        posted = await alice.post(f"/v1/conversations/{conv}/inputs",
                                  json={"content": "please run in the background"})
        assert posted.status_code == 202
        task = await _settled_task(alice, conv)

        async def runs_now() -> list[dict[str, Any]]:
            runs: list[dict[str, Any]] = (
                await alice.get(f"/v1/conversations/{conv}/runs")).json()["items"]
            return runs

        first, woken = await eventually(
            runs_now,
            lambda runs: len(runs) >= 2 and not any(r["status"] == "running" for r in runs),
            what="the woken run ended", within_s=WAIT_S, poll_s=0.05)
        assert (first["trigger"], woken["trigger"]) == ("person", "wake")

        person, notice = (await alice.get(f"/v1/conversations/{conv}/inputs")).json()["items"]
        assert (person["input_id"], person["origin"]) == (posted.json()["input_id"], "person")
        assert {k: notice[k] for k in ("origin", "run_public_id", "task_key", "delivery_mode",
                                        "state", "run_id")} == {
            "origin": "task_result", "run_public_id": first["run_id"],
            "task_key": task["task_key"], "delivery_mode": "queue", "state": "materialized",
            "run_id": woken["run_id"],
        }
        assert notice["meta"]["kind"] == "task_notification"
        assert notice["meta"]["event_id"] == task["event_id"]

        events = (await alice.get(f"/v1/conversations/{conv}/events.json")).json()["items"]
        [accepted] = [e["data"] for e in events if e["type"] == "input_accepted"
                      and e["data"]["origin"] == "task_result"]
        assert (accepted["input_id"], accepted["run_public_id"], accepted["task_key"]) == (
            notice["input_id"], first["run_id"], task["task_key"],
        )
        [start] = [e["data"] for e in events if e["type"] == "turn_status"
                   and e["data"]["run_public_id"] == woken["run_id"]
                   and e["data"]["status"] == "running"]
        assert start["inputs"] == [notice["input_id"]]
