"""U8: an archive is undone over HTTP -- the conversation takes a person's input again, the
journal says so; another principal's conversation, or an unknown one, is the same 404."""

from __future__ import annotations

from tests.service.conftest import BOB, Live, assert_problem, open_conversation


async def test_u8_an_archived_conversation_is_unarchived_and_takes_input_again(
    live: Live,
) -> None:
    async with live.client() as alice, live.client(BOB) as bob:
        conv = await open_conversation(alice)
        archived = await alice.post(f"/v1/conversations/{conv}/archive")
        assert archived.json()["status"] == "archived"
        refused = await alice.post(f"/v1/conversations/{conv}/inputs", json={"content": "hi"})
        assert_problem(refused, 409, "conversation_closed")
        for stranger, target in ((bob, conv), (alice, "conv_nope")):
            assert_problem(await stranger.post(f"/v1/conversations/{target}/unarchive"), 404,
                           "unknown_conversation")
        assert (await alice.get(f"/v1/conversations/{conv}")).json()["status"] == "archived"

        undone = await alice.post(f"/v1/conversations/{conv}/unarchive")
        assert undone.status_code == 200, undone.text
        assert undone.json()["status"] == "active"
        again = await alice.post(f"/v1/conversations/{conv}/unarchive")  # already active
        assert again.json()["status"] == "active"
        answered = await alice.post(f"/v1/conversations/{conv}/inputs?wait=30",
                                    json={"content": "hello again"})
        assert answered.json()["reply"] == "hello again"
        events = (await alice.get(f"/v1/conversations/{conv}/events.json")).json()["items"]
        assert [e["data"]["status"] for e in events if e["type"] == "conversation_status"] == [
            "archived", "active"]
