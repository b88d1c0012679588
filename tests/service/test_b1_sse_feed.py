"""B1 over HTTP: the SSE feed streams an answer as it is written (live events without an SSE
id), then its committed message; a client that reconnects mid-answer with Last-Event-ID gets
the history after it, the answer so far as one piece, then the rest -- nothing twice."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from tests.feeding import Pieces
from tests.service.conftest import KEY, WAIT_S, Servers, open_conversation
from tests.service.test_http_sse import Seen, feed_events
from tidings import Rule, ScriptedModel

STORY = "Once upon a time, a kernel kept every promise it made, even across a crash."


def _ended(event: Seen) -> bool:
    return event.event == "turn_status" and event.data["data"]["status"] == "completed"


async def read_until(events: AsyncIterator[Seen], seen: list[Seen],
                     done: Callable[[Seen], bool]) -> None:
    async for event in events:
        seen.append(event)
        if done(event):
            return
    raise AssertionError(f"the feed ended early: {[(e.id, e.event) for e in seen]}")


def live_pieces(seen: list[Seen]) -> list[tuple[int, str]]:
    return [(e.data["data"]["offset"], e.data["data"]["text"])
            for e in seen if e.event == "message_delta"]


async def test_b1_sse_streams_deltas_then_the_committed_message(servers: Servers) -> None:
    model = ScriptedModel(rules=[
        Rule({"text_contains": "story"}, {"text": STORY, "chunks": 6, "chunk_delay": 0.005}),
    ])
    live = await servers(await servers.runtimes(models=[model], master_key=KEY))
    seen: list[Seen] = []
    async with live.client() as alice:
        conv = await open_conversation(alice)
        async with asyncio.timeout(WAIT_S), alice.stream(
            "GET", f"/v1/conversations/{conv}/events"
        ) as stream:
            events = feed_events(stream)
            posted = await alice.post(f"/v1/conversations/{conv}/inputs",
                                      json={"content": "tell me a story"})
            assert posted.status_code == 202
            await read_until(events, seen, _ended)

    deltas = [e for e in seen if e.event == "message_delta"]
    # six pieces written 5 ms apart; pieces that reach the feed in one frame (a busy machine)
    # come as one, so it is at most six -- and never the whole answer at once
    assert 2 <= len(deltas) <= 6
    assert all(e.id is None and e.data["seq"] is None for e in deltas)  # live: no SSE id
    assert "".join(e.data["data"]["text"] for e in deltas) == STORY
    assert [o for o, _ in live_pieces(seen)] == [
        sum(len(t) for _, t in live_pieces(seen)[:i]) for i in range(len(deltas))]
    answer = next(i for i, e in enumerate(seen) if e.event == "message_committed"
                  and e.data["data"]["message"]["role"] == "assistant")
    assert seen[answer].data["data"]["message"]["content"] == STORY
    assert answer > seen.index(deltas[-1])
    ids = [e.id for e in seen if e.id is not None]
    assert ids == list(range(1, len(ids) + 1))
    assert all(e.data["seq"] == e.id for e in seen if e.id is not None)


async def test_b1_sse_reconnect_mid_answer_gets_history_the_text_so_far_then_the_rest(
    servers: Servers,
) -> None:
    model = Pieces(["Once ", "upon ", "a time."])
    live = await servers(await servers.runtimes(models=[model], master_key=KEY))
    before: list[Seen] = []
    after: list[Seen] = []
    async with live.client() as alice:
        conv = await open_conversation(alice)
        feed = f"/v1/conversations/{conv}/events"
        async with asyncio.timeout(WAIT_S), alice.stream("GET", feed) as stream:
            events = feed_events(stream)
            posted = await alice.post(f"/v1/conversations/{conv}/inputs",
                                      json={"content": "tell me a story"})
            assert posted.status_code == 202
            await read_until(events, before, lambda e: e.event == "message_delta")
            model.allow()
            await read_until(events, before, lambda e: e.event == "message_delta")
        # The client lost its connection mid-answer; it comes back with its last id.
        last_id = max(e.id for e in before if e.id is not None)
        async with asyncio.timeout(WAIT_S), alice.stream(
            "GET", feed, headers={"Last-Event-ID": str(last_id)}
        ) as stream:
            events = feed_events(stream)
            await read_until(events, after, lambda e: e.event == "message_delta")
            model.allow()
            await read_until(events, after, _ended)

    assert live_pieces(before) == [(0, "Once "), (5, "upon ")]
    assert live_pieces(after) == [(0, "Once upon "), (10, "a time.")]
    ids = [e.id for e in before + after if e.id is not None]
    assert ids == list(range(1, len(ids) + 1)), "nothing missed, nothing repeated"
    assert [e.data["data"]["message"]["content"] for e in after
            if e.event == "message_committed"][-1] == "Once upon a time."

