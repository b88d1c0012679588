"""B1 across processes (PostgreSQL): a watcher in one runtime process sees the answer a turn
in another process is writing, piece by piece, then its commit; a process that starts
watching mid-answer asks the writer for its draft and gets it from offset 0; pieces nobody
elsewhere watches for are not sent at all. Across processes the pieces and the commit travel
by different connections, so the last pieces may arrive after the commit: the deltas a watcher
is given still add up to the committed answer, before its commit."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.conftest import drop_postgres_database, fresh_postgres_database
from tests.crash.turn_helpers import TurnChild
from tests.feeding import Collector, Elsewhere, assembled, committed, deltas, journal, turn_ended
from tidings import FeedEvent, Profile, Runtime
from tidings.feed import wire

PEER = Path(__file__).with_name("feed_peer.py")
OWNER = "alice"


@pytest.fixture
def postgres_url(postgres_template: str) -> Iterator[str]:
    url = fresh_postgres_database(postgres_template)
    try:
        yield url
    finally:
        drop_postgres_database(postgres_template, url)


@contextlib.asynccontextmanager
async def peer(url: str, *options: str) -> AsyncIterator[TurnChild]:
    """The writing process (``feed_peer.py``); SIGKILLed and reaped on exit."""
    fd, name = tempfile.mkstemp(prefix="tidings-feed-peer-", suffix=".stderr")
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(PEER), url, *options, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=fd,
            env={**os.environ, "PYTHONPATH": str(PEER.parents[2] / "src")},
        )
    finally:
        os.close(fd)
    child = TurnChild(proc, Path(name))
    try:
        await child.checkpoint("ready")
        yield child
    finally:
        await child.kill()
        if proc.stdin is not None:
            proc.stdin.close()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                await proc.stdin.wait_closed()
        if proc.stdout is not None:
            await proc.stdout.read()
        child.forget()


def before_commit(events: list[FeedEvent]) -> list[FeedEvent]:
    """The events before the first assistant ``message_committed``."""
    for index, event in enumerate(events):
        if event.type == "message_committed" and event.data["message"]["role"] == "assistant":
            return events[:index]
    raise AssertionError("no assistant message was committed")


class Heard:
    """The live messages of one conversation this process's store heard (nobody else
    listening), up to which character of the answer they went."""

    def __init__(self, rt: Runtime, conversation_id: str) -> None:
        self.conversation_id = conversation_id
        self.reached = 0
        self._changed = asyncio.Event()
        rt.store.feed.subscribe(lambda hints, _written: None, self._heard)

    def _heard(self, messages: list[str]) -> None:
        for message in messages:
            live = wire.decode(message)
            if live is not None and live.conversation_id == self.conversation_id:
                self.reached = max(self.reached, live.offset + len(live.text))
        self._changed.set()

    async def up_to(self, characters: int) -> None:
        async with asyncio.timeout(30):
            while self.reached < characters:
                self._changed.clear()
                await self._changed.wait()


async def watch_a_story(rt: Runtime, conv: str, writer: TurnChild) -> tuple[Collector, Collector]:
    """Two watchers here of the answer ``writer`` streams, until its turn's end: one from
    before it begins, one that joins mid-answer (when this process heard the draft already)."""
    watcher = Collector(rt.watch(conv, owner=OWNER))
    await watcher.until(lambda events: journal(events), what="the history")
    await writer.send(post=conv, text="tell me a story")
    await watcher.until(lambda events: assembled(events) == "Once ", what="a piece")
    await writer.send(allow=1)
    await watcher.until(lambda events: assembled(events) == "Once upon ", what="two")
    second = Collector(rt.watch(conv, owner=OWNER))
    await second.until(lambda events: deltas(events), what="the text so far")
    await writer.send(allow=1)
    for each in (watcher, second):
        await each.until(turn_ended, what="the turn's end (written in the other process)")
    return watcher, second


@pytest.mark.postgres_only
async def test_b1_a_watcher_in_another_process_gets_the_deltas_and_the_commits(
    postgres_url: str,
) -> None:
    async with Runtime.open(postgres_url, models=[Elsewhere()]) as rt, peer(postgres_url) as writer:
        conv = (await rt.create_conversation(OWNER, Profile(model="scripted"))).conversation_id
        watcher, second = await watch_a_story(rt, conv, writer)

        assert deltas(watcher.events)[:2] == [(0, "Once "), (5, "upon ")]
        assert deltas(second.events)[:1] == [(0, "Once upon ")]
        for each in (watcher, second):
            assert assembled(before_commit(each.events)) == "Once upon a time."
            assert assembled(each.events) == "Once upon a time."
        [run] = await rt.runs.list(conv)
        for each in (watcher, second):
            [answer] = committed(each.events, "assistant")
            assert (answer["content"], answer["run_id"]) == ("Once upon a time.", run.run_id)
            assert [(e.seq, e.type) for e in journal(each.events)] == [
                (e.seq, e.type) for e in await rt.events(conv)]
            await each.stop()


@pytest.mark.postgres_only
async def test_b1_a_process_that_starts_watching_mid_answer_asks_the_writer_for_its_draft(
    postgres_url: str,
) -> None:
    async with Runtime.open(postgres_url, models=[Elsewhere()]) as rt, peer(postgres_url) as writer:
        conv = (await rt.create_conversation(OWNER, Profile(model="scripted"))).conversation_id
        heard = Heard(rt, conv)
        await writer.send(post=conv, text="tell me a story")
        await writer.checkpoint("piece")
        await writer.send(allow=1)
        await writer.checkpoint("piece")
        # Nobody watched the conversation anywhere while those two pieces were written, so
        # none went out. This process's first watcher gets the history, then the whole draft
        # so far (asked of the writer, which from then on sends it the rest).
        await asyncio.sleep(0.5)
        assert heard.reached == 0
        watcher = Collector(rt.watch(conv, owner=OWNER))
        await watcher.until(lambda events: assembled(events) == "Once upon ",
                            what="the draft so far, from the writer")
        await writer.send(allow=1)
        await watcher.until(turn_ended, what="the turn's end")

        assert deltas(watcher.events)[:1] == [(0, "Once upon ")]
        assert assembled(before_commit(watcher.events)) == "Once upon a time."
        assert committed(watcher.events, "assistant")[0]["content"] == "Once upon a time."
        first_delta = next(i for i, e in enumerate(watcher.events) if e.seq is None)
        assert any(e.type == "turn_status" for e in watcher.events[:first_delta])
        await watcher.stop()


def archived(events: list[FeedEvent]) -> bool:
    return any(e.type == "conversation_status" and e.data.get("status") == "archived"
               for e in events)


@pytest.mark.postgres_only
async def test_b1_the_last_piece_heard_after_its_commit_still_completes_the_deltas(
    postgres_url: str,
) -> None:
    # The writer sends the piece that ends the answer only once the answer has committed, so
    # every process hears the commit first: the deltas it gives its watchers must still add
    # up to the committed text, before the commit, and the late piece must not come twice.
    async with (Runtime.open(postgres_url, models=[Elsewhere()]) as rt,
                peer(postgres_url, "--last-after-commit") as writer):
        conv = (await rt.create_conversation(OWNER, Profile(model="scripted"))).conversation_id
        heard = Heard(rt, conv)  # after the runtime's hub, which so hears each message first
        watcher, second = await watch_a_story(rt, conv, writer)
        await heard.up_to(len("Once upon a time."))  # the late piece reached this process
        # A commit after it: whatever the hub passed on of the late piece is handed out to
        # the watchers before this row (and a watcher joining now is offered no draft).
        await rt.conversations.archive(conv, owner=OWNER)
        late = Collector(rt.watch(conv, owner=OWNER))
        for each in (watcher, second, late):
            await each.until(archived, what="the conversation archived")

        for each in (watcher, second):
            [answer] = committed(each.events, "assistant")
            assert answer["content"] == "Once upon a time."
            assert assembled(before_commit(each.events)) == "Once upon a time."
            assert assembled(each.events) == "Once upon a time."  # nothing after the commit
        assert deltas(late.events) == []
        for each in (watcher, second, late):
            await each.stop()
