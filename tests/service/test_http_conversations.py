"""A2: conversations, the door, goals, runs and compaction over HTTP, through a real server on
both backends."""

from __future__ import annotations

from tests.service.conftest import BOB, Live, assert_problem, open_conversation


async def test_a2_create_post_and_read_the_transcript(live: Live) -> None:
    async with live.client() as alice:
        conv = await open_conversation(alice, title="first")
        got = (await alice.get(f"/v1/conversations/{conv}")).json()
        assert (got["owner"], got["title"], got["status"]) == ("alice", "first", "active")
        assert got["profile"]["model"] == "scripted"

        posted = await alice.post(f"/v1/conversations/{conv}/inputs",
                                  json={"content": "hello there", "meta": {"client": "test"}})
        assert posted.status_code == 202, posted.text
        accepted = posted.json()
        assert accepted["origin"] == "person"
        assert accepted["authored_by"] == {"kind": "human", "handle": "alice",
                                           "display_name": "alice"}
        assert accepted["meta"] == {"client": "test"}
        assert accepted["queue_position"] == 1

        await live.runtime.settle(conv)
        transcript = (await alice.get(f"/v1/conversations/{conv}/transcript")).json()
        assert [(m["role"], m["content"]) for m in transcript["items"]] == [
            ("user", "hello there"), ("assistant", "hello there")]
        [user, _] = transcript["items"]
        assert user["input_id"] == accepted["input_id"]
        newer = (await alice.get(f"/v1/conversations/{conv}/transcript",
                                 params={"after_seq": user["seq"]})).json()
        assert [m["role"] for m in newer["items"]] == ["assistant"]
        assert transcript["next_after_seq"] == newer["next_after_seq"]

        [run] = (await alice.get(f"/v1/conversations/{conv}/runs")).json()["items"]
        assert (run["status"], run["trigger"]) == ("completed", "person")
        one = await alice.get(f"/v1/conversations/{conv}/runs/{run['run_id']}")
        assert one.json() == run
        [listed] = (await alice.get(f"/v1/conversations/{conv}/inputs")).json()["items"]
        assert (listed["input_id"], listed["state"]) == (accepted["input_id"], "materialized")
        assert listed["run_id"] == run["run_id"]


async def test_a2_idempotency_key_returns_the_first_input(live: Live) -> None:
    async with live.client() as alice:
        conv = await open_conversation(alice)
        body = {"content": "once", "idempotency_key": "k-1", "delivery_mode": "steer"}
        first = await alice.post(f"/v1/conversations/{conv}/inputs", json=body)
        again = await alice.post(f"/v1/conversations/{conv}/inputs", json=body)
        assert first.status_code == again.status_code == 202
        assert first.json()["input_id"] == again.json()["input_id"]  # its state may have moved
        assert first.json()["delivery_mode"] == "steer"
        await live.runtime.settle(conv)
        inputs = (await alice.get(f"/v1/conversations/{conv}/inputs")).json()["items"]
        assert [i["input_id"] for i in inputs] == [first.json()["input_id"]]


async def test_a2_goal_stop_compact_archive_and_delete(live: Live) -> None:
    async with live.client() as alice:
        conv = await open_conversation(alice)
        goal = await alice.put(f"/v1/conversations/{conv}/goal",
                               json={"status": "paused", "text": "ship it"})
        assert (goal.json()["goal_status"], goal.json()["goal_text"]) == ("paused", "ship it")
        assert_problem(await alice.put(f"/v1/conversations/{conv}/goal",
                                       json={"status": "someday"}), 422, "invalid_input")
        checkpoint = await alice.post(f"/v1/conversations/{conv}/goal/checkpoint")
        assert (checkpoint.status_code, checkpoint.json()) == (202, {"status": "accepted"})

        await alice.post(f"/v1/conversations/{conv}/inputs", json={"content": "some history"})
        await live.runtime.settle(conv)
        stopped = await alice.post(f"/v1/conversations/{conv}/stop")
        assert (stopped.status_code, stopped.json()) == (200, {"run_ids": []})
        compacted = await alice.post(f"/v1/conversations/{conv}/compact")
        assert compacted.status_code == 200, compacted.text
        summary_seq = compacted.json()["message_seq"]
        transcript = (await alice.get(f"/v1/conversations/{conv}/transcript")).json()["items"]
        assert transcript[-1]["seq"] == summary_seq
        assert transcript[-1]["meta"]["kind"] == "compaction_summary"

        archived = await alice.post(f"/v1/conversations/{conv}/archive")
        assert archived.json()["status"] == "archived"
        assert_problem(await alice.post(f"/v1/conversations/{conv}/inputs",
                                        json={"content": "too late"}), 409,
                       "conversation_closed")
        deleted = await alice.delete(f"/v1/conversations/{conv}")
        assert (deleted.status_code, deleted.json()["status"]) == (200, "tombstoned")
        assert_problem(await alice.get(f"/v1/conversations/{conv}"), 404,
                       "unknown_conversation")
        assert_problem(await alice.delete(f"/v1/conversations/{conv}"), 404,
                       "unknown_conversation")


async def test_a2_list_pages_through_the_principals_own_conversations(live: Live) -> None:
    async with live.client() as alice, live.client(BOB) as bob:
        mine = sorted([await open_conversation(alice) for _ in range(3)])
        theirs = await open_conversation(bob)
        first = (await alice.get("/v1/conversations", params={"limit": 2})).json()
        assert [c["conversation_id"] for c in first["items"]] == mine[:2]
        assert first["next_after"] == mine[1]
        rest = (await alice.get("/v1/conversations",
                                params={"limit": 2, "after": first["next_after"]})).json()
        assert [c["conversation_id"] for c in rest["items"]] == mine[2:]
        assert rest["next_after"] is None
        listed = (await bob.get("/v1/conversations")).json()["items"]
        assert [c["conversation_id"] for c in listed] == [theirs]
        assert_problem(await alice.get("/v1/conversations", params={"limit": 0}), 422,
                       "invalid_input")
