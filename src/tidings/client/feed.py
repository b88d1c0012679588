"""A conversation's event feed over Server-Sent Events, resumed by itself.

After a dropped connection, a server error or a server restart the feed reconnects with
``Last-Event-ID`` (the last journal sequence received), with a backoff up to ``max_delay_s``;
the service then sends what followed that sequence, so nothing is lost and nothing repeats
(P4). Live events (an answer being written: ``message_delta``) carry no sequence and are not
replayed. A refusal (4xx: an unknown conversation, a bad token) ends it with the library's
error.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import dataclass

import httpx
from httpx_sse import aconnect_sse

from tidings.client.problems import error_of, problem_of
from tidings.service.schemas import EventOut


@dataclass(frozen=True)
class FeedLost:
    """The feed's connection dropped; it reconnects by itself after ``after_seq``."""

    reason: str
    after_seq: int


@dataclass(frozen=True)
class FeedResumed:
    """The feed is connected again, after ``after_seq``."""

    after_seq: int


async def follow(
    http: httpx.AsyncClient, path: str, after_seq: int, *, max_delay_s: float,
    timeouts: httpx.Timeout,
) -> AsyncGenerator[EventOut | FeedLost | FeedResumed]:
    """The feed of ``path`` after ``after_seq``, with a notice at each loss and resumption."""
    last = after_seq
    delay = min(0.25, max_delay_s)
    lost = False
    while True:
        headers = {"Last-Event-ID": str(last)} if last else {}
        try:
            async with aconnect_sse(http, "GET", path, headers=headers,
                                    timeout=timeouts) as source:
                response = source.response
                if response.status_code >= 400:
                    await response.aread()
                    problem = problem_of(response)
                    if response.status_code < 500:
                        raise error_of(problem)
                    raise httpx.HTTPStatusError(f"{problem.code}: {problem.detail}",
                                                request=response.request, response=response)
                if lost:
                    yield FeedResumed(last)
                    lost = False
                delay = min(0.25, max_delay_s)
                async for sse in source.aiter_sse():
                    # A keep-alive comment is dispatched as an event without data.
                    if not sse.data:
                        continue
                    event = EventOut.model_validate_json(sse.data)
                    if event.seq is not None:
                        if event.seq <= last:
                            continue  # already seen (a resumed feed starts after it anyway)
                        last = event.seq
                    yield event
            reason = "the server ended the feed"
        except httpx.HTTPError as exc:  # httpx-sse's SSEError is one too
            reason = str(exc) or type(exc).__name__
        if not lost:
            yield FeedLost(reason, last)
            lost = True
        await asyncio.sleep(delay)
        delay = min(delay * 2, max_delay_s)


__all__ = ("FeedLost", "FeedResumed", "follow")
