"""P3: the webhook worker's HTTP side runs on a thread of its own; however its start and its
close cross (a runtime closed while the worker starts), the close ends the thread and returns --
a shutdown never waits for a sender that was still opening."""

from __future__ import annotations

import asyncio
import threading

import httpx

from tidings.push.sender import Sender


def _answer(request: httpx.Request) -> httpx.Response:
    return httpx.Response(204)


async def test_p3_a_sender_posts_on_its_own_thread_and_closes() -> None:
    sender = Sender(timeout_s=5, transport=httpx.MockTransport(_answer))
    await asyncio.to_thread(sender.start)
    seen: list[str] = []

    async def post(client: httpx.AsyncClient) -> int:
        seen.append(threading.current_thread().name)
        return (await client.post("http://receiver.test/hook", content=b"{}")).status_code

    assert await sender.run(post) == 204
    assert seen == ["tidings-webhooks"]
    await asyncio.wait_for(asyncio.to_thread(sender.close), 5)
    assert not sender.running
    await asyncio.wait_for(asyncio.to_thread(sender.close), 5)  # again: nothing to do


async def test_p3_a_sender_closed_while_it_starts_ends() -> None:
    for _ in range(50):  # the close lands at every point of the start
        sender = Sender(timeout_s=5, transport=httpx.MockTransport(_answer))
        starting = asyncio.ensure_future(asyncio.to_thread(sender.start))
        await asyncio.sleep(0)
        await asyncio.wait_for(asyncio.to_thread(sender.close), 5)
        await asyncio.wait_for(starting, 5)
        assert not sender.running


async def test_p3_a_sender_closed_before_it_starts_starts_nothing() -> None:
    sender = Sender(timeout_s=5)
    await asyncio.to_thread(sender.close)
    await asyncio.wait_for(asyncio.to_thread(sender.start), 5)
    assert not sender.running
