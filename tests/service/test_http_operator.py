"""The routes the console stands on, over HTTP on both backends: an operator's token reaches
every conversation (a principal's only its own); the list says each conversation's last
activity and newest run; an operator inspects, retries and discards dead letters and lists the
instances; ``/v1/session`` says who a token is. Each answer is checked against the schema."""

from __future__ import annotations

from tests.conftest import Backend
from tests.scenarios.test_locked import dead_letter
from tests.service.conftest import (
    BOB,
    OPERATOR,
    Live,
    Servers,
    assert_problem,
    open_conversation,
)
from tests.service.test_http_openapi import Documented
from tidings.clock import ManualClock, SystemClock
from tidings.conversations.catalog import Conversations
from tidings.records.outbox import Outbox, OutboxConfig
from tidings.store import open_store
from tidings.types import Profile


async def documented(live: Live) -> Documented:
    async with live.client(None) as anonymous:
        return Documented((await anonymous.get("/openapi.json")).json())


async def test_o2_an_operator_reaches_every_conversation_and_a_principal_only_its_own(
    live: Live,
) -> None:
    schema = await documented(live)
    async with live.client() as alice, live.client(BOB) as bob, \
            live.client(OPERATOR) as operator:
        mine = await open_conversation(alice, title="alice's")
        theirs = await open_conversation(bob, title="bob's")
        listed = await operator.get("/v1/conversations")
        schema.check(listed, "/v1/conversations")
        assert {(c["conversation_id"], c["owner"]) for c in listed.json()["items"]} == {
            (mine, "alice"), (theirs, "bob")}
        assert [c["conversation_id"] for c in (await bob.get("/v1/conversations")).json()[
            "items"]] == [theirs]
        foreign = await bob.get(f"/v1/conversations/{mine}")
        unknown = await bob.get("/v1/conversations/conv_nobody")
        assert_problem(foreign, 404, "unknown_conversation")
        assert foreign.json()["title"] == unknown.json()["title"]

        # The operator acts on alice's conversation as the operator, not as alice.
        answered = await operator.post(f"/v1/conversations/{mine}/inputs?wait=30",
                                       json={"content": "from the operator"})
        assert answered.status_code == 200, answered.text
        assert answered.json()["reply"] == "from the operator"
        assert answered.json()["input"]["authored_by"]["handle"] == "operator"
        transcript = (await operator.get(f"/v1/conversations/{mine}/transcript")).json()
        assert [m["content"] for m in transcript["items"]] == ["from the operator"] * 2
        # The output of its results stays the owner's.
        assert_problem(await operator.get(f"/v1/conversations/{mine}/results"), 403,
                       "forbidden")
        assert (await alice.get(f"/v1/conversations/{mine}/results")).status_code == 200


async def test_o3_the_list_says_each_conversations_last_activity_and_newest_run(
    live: Live,
) -> None:
    schema = await documented(live)
    async with live.client() as alice:
        first = await open_conversation(alice)
        second = await open_conversation(alice)
        answered = await alice.post(f"/v1/conversations/{first}/inputs?wait=30",
                                    json={"content": "hello"})
        assert answered.json()["status"] == "completed"
        page = await alice.get("/v1/conversations")
        schema.check(page, "/v1/conversations")
        items = {c["conversation_id"]: c for c in page.json()["items"]}
        assert list(items) == [first, second]  # by id: the oldest first
        run = items[first]["run"]
        assert (run["run_id"], run["status"], run["model"]) == (
            answered.json()["run"]["run_id"], "completed", "scripted")
        assert items[second]["run"] is None
        # Its last activity is its newest event: the answer, after the second was opened.
        assert items[first]["last_activity_us"] > items[second]["last_activity_us"]
        assert items[second]["last_activity_us"] >= items[second]["created_at_us"]

        newest = (await alice.get("/v1/conversations?order=newest&limit=1")).json()
        assert ([c["conversation_id"] for c in newest["items"]], newest["next_after"]) == (
            [second], second)
        older = (await alice.get(f"/v1/conversations?order=newest&limit=1&after={second}")
                 ).json()
        assert [c["conversation_id"] for c in older["items"]] == [first]
        assert_problem(await alice.get("/v1/conversations?order=sideways"), 422,
                       "invalid_input")


async def seed_conversation(url: str) -> str:
    """Alice's conversation, opened on the database before any server runs over it."""
    store = await open_store(url)
    try:
        return (await Conversations(store, SystemClock()).create(
            "alice", Profile(model="scripted"), title="seeded")).conversation_id
    finally:
        await store.close()


async def _seed(url: str) -> tuple[str, list[int]]:
    """Before the server opens the database: alice's conversation with two dead letters."""
    conversation = await seed_conversation(url)
    first = await dead_letter(url, conversation)
    # A second letter, under another key (the helper's key would publish nothing new).
    clock = ManualClock(SystemClock().now_us())
    async with Outbox.open(url, clock=clock, config=OutboxConfig(max_attempts=1)) as outbox:
        second = await outbox.store.transact(lambda tx: outbox.publish(
            tx, conversation, "job.finished", {"n": 2}, idempotency_key="dead-2"))
        await outbox.release(await outbox.claim(conversation, owner="run-2"), "model_permanent")
    return conversation, [first, int(second.delivery_id)]


async def test_o5_an_operator_inspects_retries_and_discards_dead_letters(
    servers: Servers, backend: Backend,
) -> None:
    conversation, (first, second) = await _seed(backend.url)
    live = await servers()
    schema = await documented(live)
    async with live.client() as alice, live.client(OPERATOR) as operator:
        listed = (await operator.get("/v1/dead-letters")).json()["items"]
        assert [d["delivery_id"] for d in listed] == [first, second]
        detail = await operator.get(f"/v1/dead-letters/{first}")
        schema.check(detail, "/v1/dead-letters/{delivery_id}")
        assert (detail.json()["conversation_id"], detail.json()["payload"]) == (
            conversation, {"n": 1})
        for path in (f"/v1/dead-letters/{first}", "/v1/instances"):
            assert_problem(await alice.get(path), 403, "forbidden")
        for action in ("retry", "discard"):
            assert_problem(await alice.post(f"/v1/dead-letters/{first}/{action}"), 403,
                           "forbidden")

        retried = await operator.post(f"/v1/dead-letters/{first}/retry")
        schema.check(retried, "/v1/dead-letters/{delivery_id}/retry")
        assert retried.json() == {"delivery_id": first, "conversation_id": conversation,
                                  "state": "ready"}
        assert_problem(await operator.get(f"/v1/dead-letters/{first}"), 404,
                       "unknown_dead_letter")
        again = await operator.post(f"/v1/dead-letters/{first}/retry")
        assert_problem(again, 409, "not_dead_letter")
        schema.check(again, "/v1/dead-letters/{delivery_id}/retry")

        discarded = await operator.post(f"/v1/dead-letters/{second}/discard")
        assert discarded.json()["state"] == "acknowledged"
        assert (await operator.get("/v1/dead-letters")).json()["items"] == []
        assert (await operator.get("/v1/signals/stats")).json()["dead_letters"] == 0
        assert_problem(await operator.post("/v1/dead-letters/999999/discard"), 404,
                       "unknown_dead_letter")
        assert_problem(await operator.post("/v1/dead-letters/0/retry"), 422, "invalid_input")


async def test_o5_the_instances_and_the_session_say_who_serves_and_who_asks(
    live: Live,
) -> None:
    schema = await documented(live)
    async with live.client() as alice, live.client(OPERATOR) as operator, \
            live.client(None) as anonymous:
        found = await operator.get("/v1/instances")
        schema.check(found, "/v1/instances")
        serving = [i for i in found.json()["items"] if i["serving"]]
        assert [(i["instance_id"], i["state"]) for i in serving] == [
            (live.runtime.instance_id, "live")]

        mine = await alice.get("/v1/session")
        schema.check(mine, "/v1/session")
        assert (mine.json()["principal"], mine.json()["operator"]) == ("alice", False)
        assert "scripted" in mine.json()["models"]
        assert "shell" in mine.json()["tools"]
        ops = (await operator.get("/v1/session")).json()
        assert (ops["principal"], ops["operator"], ops["locked"]) == (None, True, False)
        refused = await anonymous.get("/v1/session")
        assert_problem(refused, 401, "unauthorized")
