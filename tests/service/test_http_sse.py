"""A2, M15: the event feed over Server-Sent Events resumes from a journal sequence. A client
that reads, loses its server, and reconnects to a new server (a new runtime on the same
database) with ``Last-Event-ID`` gets every event exactly once."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx

from tests.service.conftest import WAIT_S, Servers, open_conversation


@dataclass(frozen=True)
class Received:
    """A journal event of the feed (it has an SSE id)."""

    id: int
    event: str
    data: dict[str, Any]


@dataclass(frozen=True)
class Seen:
    """Any event of the feed: ``id`` is None for a live one (an answer being written)."""

    id: int | None
    event: str
    data: dict[str, Any]


async def feed_events(
    response: httpx.Response, on_comment: Callable[[str], None] | None = None
) -> AsyncIterator[Seen]:
    """Every event of an SSE stream; comments (keep-alive pings) go to ``on_comment``."""
    fields: dict[str, str] = {}
    async for line in response.aiter_lines():
        if not line:
            if "data" in fields:
                seq = fields.get("id")
                yield Seen(None if seq is None else int(seq), fields["event"],
                           json.loads(fields["data"]))
            fields = {}
        elif line.startswith(":"):
            if on_comment is not None:
                on_comment(line)
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            fields[name] = f"{fields[name]}\n{value}" if name == "data" and name in fields \
                else value


async def sse(
    response: httpx.Response, on_comment: Callable[[str], None] | None = None
) -> AsyncIterator[Received]:
    """The journal events of an SSE stream (live ones are left out)."""
    async for seen in feed_events(response, on_comment):
        if seen.id is not None:
            yield Received(seen.id, seen.event, seen.data)


def _turn_ended(event: Received) -> bool:
    return event.event == "turn_status" and event.data["data"]["status"] == "completed"


async def test_m15_feed_resumes_across_a_server_restart_exactly_once(servers: Servers) -> None:
    first = await servers()
    seen: list[Received] = []
    async with first.client() as alice:
        conv = await open_conversation(alice)
        feed = f"/v1/conversations/{conv}/events"
        async with asyncio.timeout(WAIT_S), alice.stream("GET", feed) as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
            events = sse(stream)
            posted = await alice.post(f"/v1/conversations/{conv}/inputs",
                                      json={"content": "one"})
            assert posted.status_code == 202
            async for event in events:
                seen.append(event)
                if _turn_ended(event):
                    break
            # The server goes away while the feed is open: the stream ends; whatever was
            # already on the wire is still read.
            await first.stop()
            seen += [event async for event in events]
    await first.runtime.close()

    # While nothing serves, a new runtime on the same database does more work.
    runtime = await servers.runtime()
    await runtime.post(conv, "two", owner="alice")
    await runtime.settle(conv)
    second = await servers(runtime)
    async with second.client() as alice:
        resumed_from = seen[-1].id
        async with asyncio.timeout(WAIT_S), alice.stream(
            "GET", feed, headers={"Last-Event-ID": str(resumed_from)},
            params={"after": 0},  # the header wins: it is the reconnecting client's position
        ) as stream:
            events = sse(stream)
            await alice.post(f"/v1/conversations/{conv}/inputs", json={"content": "three"})
            ended = 0
            async for event in events:
                seen.append(event)
                ended += _turn_ended(event)
                if ended == 2:  # the turns of "two" and of "three"
                    break

    journal = await runtime.events(conv, owner="alice")
    seqs = [e.id for e in seen]
    assert seqs == list(range(1, len(seqs) + 1)), "nothing missed, nothing repeated"
    assert [(e.seq, e.type, e.data) for e in journal[: len(seen)]] == [
        (e.id, e.event, e.data["data"]) for e in seen]
    contents = [m.content for m in await runtime.transcript(conv) if m.role == "user"]
    assert contents == ["one", "two", "three"]


async def test_m15_feed_pings_and_ends_when_the_conversation_is_deleted(
    servers: Servers,
) -> None:
    live = await servers(feed_ping=timedelta(milliseconds=30))
    comments: list[str] = []
    pinged = asyncio.Event()
    received: list[Received] = []

    def on_comment(line: str) -> None:
        comments.append(line)
        pinged.set()

    async with live.client() as alice:
        conv = await open_conversation(alice)
        async with asyncio.timeout(WAIT_S), alice.stream(
            "GET", f"/v1/conversations/{conv}/events", params={"after": 1}
        ) as stream:

            async def read() -> None:
                received.extend([event async for event in sse(stream, on_comment)])

            reader = asyncio.create_task(read())
            await pinged.wait()  # a quiet feed still sends keep-alive pings
            assert (await alice.delete(f"/v1/conversations/{conv}")).status_code == 200
            await reader  # the feed ends: the conversation is gone
    assert comments[0].startswith(": ping")
    assert all(event.id > 1 for event in received)


async def test_a2_events_json_pages_after_a_sequence(servers: Servers) -> None:
    live = await servers()
    async with live.client() as alice:
        conv = await open_conversation(alice)
        await alice.post(f"/v1/conversations/{conv}/inputs", json={"content": "hello"})
        await live.runtime.settle(conv)
        page = (await alice.get(f"/v1/conversations/{conv}/events.json")).json()
        seqs = [e["seq"] for e in page["items"]]
        assert seqs == list(range(1, len(seqs) + 1))
        assert page["next_after"] == seqs[-1]
        assert {"conversation_created", "input_accepted", "turn_status"} <= {
            e["type"] for e in page["items"]}
        later = (await alice.get(f"/v1/conversations/{conv}/events.json",
                                 params={"after": seqs[1]})).json()
        assert later["items"] == page["items"][2:]
        empty = (await alice.get(f"/v1/conversations/{conv}/events.json",
                                 params={"after": page["next_after"]})).json()
        assert empty == {"items": [], "next_after": page["next_after"]}


async def test_h5_a_graceful_shutdown_completes_every_open_feed_even_one_inside_a_read(
    servers: Servers,
) -> None:
    """A server stopping under load finds its feeds busy, each inside a journal read (here its
    first one, which takes a second, longer than sse-starlette's half-second exit poll). Every
    feed still ends by itself with a complete response: its client sees the stream end, not a
    broken connection, and reconnects with its last id."""
    feeds = 8
    live = await servers()
    runtime = live.runtime
    connected, reading = 0, 0
    all_connected, all_reading = asyncio.Event(), asyncio.Event()
    outcomes: list[str] = []
    async with live.client() as alice:
        conv = await open_conversation(alice)

        async def watch() -> None:
            nonlocal connected
            try:
                async with alice.stream("GET", f"/v1/conversations/{conv}/events") as stream:
                    assert stream.status_code == 200
                    connected += 1
                    if connected == feeds:
                        all_connected.set()
                    async for _ in stream.aiter_lines():
                        pass
                outcomes.append("complete")
            except httpx.TransportError as exc:
                outcomes.append(type(exc).__name__)

        read_events = runtime.events

        async def slow_events(*args: Any, **kwargs: Any) -> Any:
            nonlocal reading
            reading += 1
            if reading == feeds:
                all_reading.set()
            await asyncio.sleep(1.0)  # the slow read, not a wait of the test
            return await read_events(*args, **kwargs)

        runtime.events = slow_events  # type: ignore[method-assign]
        watchers = [asyncio.create_task(watch()) for _ in range(feeds)]
        async with asyncio.timeout(WAIT_S):
            await all_connected.wait()
            await all_reading.wait()  # every feed is inside a read
            await live.stop()
            await asyncio.gather(*watchers)
    assert outcomes == ["complete"] * feeds
