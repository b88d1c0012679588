"""U8: a conversation's profile can be changed over HTTP, checked as at create (a model or tool
the service does not have is refused and nothing changes), and the next turn uses it."""

from __future__ import annotations

from tests.service.conftest import BOB, Live, assert_problem, open_conversation


async def test_u8_a_profile_change_is_checked_and_the_next_turn_uses_it(live: Live) -> None:
    async with live.client() as alice, live.client(BOB) as bob:
        conv = await open_conversation(alice)
        path = f"/v1/conversations/{conv}/profile"
        refused = await alice.put(path, json={"profile": {"model": "nope"}})
        assert_problem(refused, 422, "unknown_model_or_tool")
        unknown = await alice.put(path, json={"profile": "no-such-profile"})
        assert_problem(unknown, 422, "unknown_profile")
        assert (await alice.get(f"/v1/conversations/{conv}")).json()["profile"]["tools"] == []
        assert_problem(await bob.put(path, json={"profile": {"model": "scripted"}}), 404,
                       "unknown_conversation")
        changed = await alice.put(path, json={"profile": {"model": "scripted",
                                                          "tools": ["shell"]}})
        assert changed.status_code == 200, changed.text
        assert changed.json()["profile"]["tools"] == ["shell"]
        answered = await alice.post(f"/v1/conversations/{conv}/inputs?wait=30",
                                    json={"content": "hello"})
        assert answered.json()["reply"] == "hello"
        events = (await alice.get(f"/v1/conversations/{conv}/events.json")).json()
        assert "profile_changed" in [e["type"] for e in events["items"]]
