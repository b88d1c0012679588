"""B1: one watcher's rules, without a database. Journal events pass once and in sequence (a
gap is read from the journal first); deltas pass once per character (overlaps cut, duplicates
dropped, a discard resets the step, a committed step takes no more, and the rest of a step it
was given part of comes before its commit); a watcher that falls too far behind catches up
from the journal and the drafts instead of holding everything."""

from __future__ import annotations

from typing import Any

from tidings.feed.channel import coalesced
from tidings.feed.drafts import DraftKey, delta_event, discarded_event
from tidings.feed.watch import QUEUE_LIMIT, Watch
from tidings.types import ConversationId, Event, FeedEvent, RunId

CONV = "conv_1"
KEY = ("run_1", 1)


def event(seq: int, type: str = "noted", **data: Any) -> Event:
    return Event(ConversationId(CONV), seq, type, RunId("run_1"), dict(data), 0)


def committed(seq: int, step: int, content: str = "done") -> Event:
    return event(seq, "message_committed", message={"role": "assistant", "run_id": "run_1",
                                                    "step": step, "content": content},
                 by_runtime=False)


class Host:
    """The hub, as a watch sees it: the drafts it offers and a journal to read."""

    def __init__(self, journal: list[Event]) -> None:
        self.journal = journal
        self.drafts: list[tuple[DraftKey, str]] = []
        self.reads: list[int] = []
        self.attached: list[Watch] = []

    def attach(self, watch: Watch) -> Host:
        self.attached.append(watch)
        return self

    def detach(self, watch: Watch) -> None:
        self.attached.remove(watch)

    def drafts_of(self, conversation_id: str) -> list[tuple[DraftKey, str]]:
        return list(self.drafts)

    def joined(self, seq: int) -> bool:
        return True

    def now_us(self) -> int:
        return 0

    async def read(self, after: int) -> list[Event]:
        self.reads.append(after)
        return [e for e in self.journal if e.seq > after]

    def watch(self, after_seq: int = 0) -> Watch:
        return Watch(self, CONV, after_seq=after_seq, read=self.read)


def shown(events: list[FeedEvent]) -> list[tuple[Any, ...]]:
    return [(e.seq, e.type, e.data.get("offset"), e.data.get("text")) for e in events]


async def take(watch: Watch, count: int) -> list[FeedEvent]:
    return [await anext(watch) for _ in range(count)]


def delta(offset: int, text: str, key: DraftKey = KEY) -> FeedEvent:
    return delta_event(CONV, key, offset, text, 0)


class StaleHost(Host):
    """A first read from a snapshot older than where the conversation's reader starts."""

    def __init__(self, journal: list[Event], snapshot: int, reader_at: int) -> None:
        super().__init__(journal)
        self.snapshot, self.reader_at = snapshot, reader_at
        self.joins: list[int] = []

    async def read(self, after: int) -> list[Event]:
        page = await super().read(after)
        if len(self.reads) == 1:
            return [e for e in page if e.seq <= self.snapshot]
        return page

    def joined(self, seq: int) -> bool:
        self.joins.append(seq)
        return self.reader_at <= seq


async def test_b1_a_watch_whose_read_ended_before_the_reader_started_reads_on() -> None:
    # Rows 2 and 3 committed after the watch's read took its snapshot and before the
    # conversation's reader found where to start (at 3): nobody would hand them out.
    host = StaleHost([event(1), event(2), event(3)], snapshot=1, reader_at=3)
    watch = host.watch()
    assert [e.seq for e in await take(watch, 3)] == [1, 2, 3]
    assert host.reads == [0, 1]
    assert host.joins == [1, 3]
    # Reading on is bounded: a reader that is still ahead after a second read is taken at
    # its word (what it hands out from then on queues for the watch), never read in a loop.
    stuck = StaleHost([event(1)], snapshot=1, reader_at=5)
    watch = stuck.watch()
    assert [e.seq for e in await take(watch, 1)] == [1]
    watch.push(FeedEvent.of(event(2)))
    stuck.journal.append(event(2))
    assert [e.seq for e in await take(watch, 1)] == [2]
    assert len(stuck.reads) == 2


async def test_b1_journal_events_pass_once_and_a_gap_is_read_first() -> None:
    host = Host([event(1), event(2)])
    watch = host.watch()
    assert [e.seq for e in await take(watch, 2)] == [1, 2]
    assert host.attached == [watch]  # joined before its first read
    host.journal += [event(3), event(4), event(5)]
    watch.push(FeedEvent.of(event(2)))  # a duplicate
    watch.push(FeedEvent.of(event(3)))
    watch.push(FeedEvent.of(event(5)))  # 4 never came live: a gap
    assert [e.seq for e in await take(watch, 3)] == [3, 4, 5]
    assert host.reads == [0, 3]  # the gap was read after 3
    watch.push(FeedEvent.of(event(4)))
    watch.push(FeedEvent.of(event(6)))
    host.journal.append(event(6))
    assert [e.seq for e in await take(watch, 1)] == [6]
    await watch.aclose()
    assert host.attached == []


async def test_b1_deltas_pass_once_per_character() -> None:
    host = Host([event(1)])
    host.drafts = [(KEY, "Once ")]
    watch = host.watch()
    # History, then the draft so far as one piece at offset 0.
    assert shown(await take(watch, 2)) == [
        (1, "noted", None, None), (None, "message_delta", 0, "Once ")]
    watch.push(delta(0, "Once "))  # queued before the snapshot was taken: a duplicate
    watch.push(delta(3, "e upon"))  # overlaps: only "upon" is new
    watch.push(delta(10, "a"))  # past what this watcher has: refused
    watch.push(discarded_event(CONV, KEY, "model_retryable", 0))
    watch.push(delta(0, "Again"))  # the step starts over after a discard
    host.journal.append(committed(2, step=1))
    watch.push(FeedEvent.of(committed(2, step=1)))
    watch.push(delta(5, " late"))  # the step is committed: nothing more of it
    watch.push(delta(0, "next", key=("run_1", 2)))
    assert shown(await take(watch, 5)) == [
        (None, "message_delta", 5, "upon"),
        (None, "message_discarded", None, None),
        (None, "message_delta", 0, "Again"),
        (2, "message_committed", None, None),
        (None, "message_delta", 0, "next"),
    ]


async def test_b1_the_rest_of_an_answer_heard_after_its_commit_comes_before_the_commit() -> None:
    host = Host([event(1)])
    watch = host.watch()
    await take(watch, 1)
    watch.push(delta(0, "Once "))
    watch.push(delta(5, "upon "))
    assert shown(await take(watch, 1)) == [(None, "message_delta", 0, "Once upon ")]
    # The last piece travels by another connection than the commit and is heard after it.
    host.journal.append(committed(2, step=1, content="Once upon a time."))
    watch.push(FeedEvent.of(committed(2, step=1, content="Once upon a time.")))
    watch.push(delta(10, "a time."))
    # A step it was given nothing of, one it was given whole, one the commit does not begin
    # with (the commit replaces it), each committed: none gets more.
    watch.push(delta(0, "All of it", key=("run_1", 3)))
    watch.push(delta(0, "Draft", key=("run_1", 4)))
    for seq, step, content in ((3, 2, "Unseen"), (4, 3, "All of it"), (5, 4, "Other")):
        host.journal.append(committed(seq, step, content))
        watch.push(FeedEvent.of(committed(seq, step, content)))
    assert shown(await take(watch, 7)) == [
        (None, "message_delta", 10, "a time."),
        (2, "message_committed", None, None),
        (None, "message_delta", 0, "All of it"),
        (None, "message_delta", 0, "Draft"),
        (3, "message_committed", None, None),
        (4, "message_committed", None, None),
        (5, "message_committed", None, None),
    ]
    assert watch.ready_now() == []


async def test_b1_a_watcher_far_behind_catches_up_instead_of_holding_everything() -> None:
    host = Host([event(1)])
    watch = host.watch()
    assert [e.seq for e in await take(watch, 1)] == [1]
    for index in range(QUEUE_LIMIT + 10):  # its consumer does not read meanwhile
        watch.push(delta(index, "x"))
    host.journal.append(event(2))
    host.drafts = [(KEY, "x" * (QUEUE_LIMIT + 10))]
    caught_up = await take(watch, 2)
    assert [(e.seq, e.type) for e in caught_up] == [(2, "noted"), (None, "message_delta")]
    assert (caught_up[1].data["offset"], len(caught_up[1].data["text"])) == (
        0, QUEUE_LIMIT + 10)
    assert host.reads == [0, 1]


async def test_b1_a_deleted_conversation_ends_the_watch_after_what_came_before() -> None:
    host = Host([event(1), event(2, "conversation_status", status="tombstoned")])
    watch = host.watch()
    assert [e.type for e in [e async for e in watch]] == ["noted", "conversation_status"]
    closed = host.watch()
    closed.close()
    assert [e async for e in closed] == []


async def test_b1_a_live_event_waits_only_for_rows_committed_before_it() -> None:
    host = Host([event(1), event(2)])
    watch = host.watch()
    assert [e.seq for e in await take(watch, 2)] == [1, 2]
    # Handed out when the channel had given out row 2: it passes with no read of its own, even
    # though row 3 committed since (row 3 reaches the watch behind it, from the channel).
    host.journal.append(event(3))
    watch.push(delta(0, "Once"), 2)
    watch.push(FeedEvent.of(event(3)))
    assert shown(await take(watch, 2)) == [(None, "message_delta", 0, "Once"),
                                           (3, "noted", None, None)]
    assert host.reads == [0]
    # Handed out after rows 4 and 5, which this watch never got (it joined late): they are
    # read and served first, then the delta -- once.
    host.journal += [event(4), event(5)]
    watch.push(delta(4, " upon"), 5)
    assert shown(await take(watch, 3)) == [(4, "noted", None, None), (5, "noted", None, None),
                                           (None, "message_delta", 4, " upon")]
    assert host.reads == [0, 3]


def test_b1_adjacent_pieces_of_one_answer_go_out_as_one_delta() -> None:
    other = ("run_1", 2)
    events = [delta(0, "On"), delta(2, "ce "), delta(5, "upon"),  # one run: joined
              delta(0, "x", key=other),  # another step: apart
              delta(9, "a"),  # not adjacent to "upon" (a gap): apart
              delta(10, " time"),
              discarded_event(CONV, KEY, "model_retryable", 0),  # order kept around it
              delta(0, "Again")]
    assert shown(coalesced(events)) == [
        (None, "message_delta", 0, "Once upon"),
        (None, "message_delta", 0, "x"),
        (None, "message_delta", 9, "a time"),
        (None, "message_discarded", None, None),
        (None, "message_delta", 0, "Again"),
    ]
    single = [delta(0, "alone")]
    assert coalesced(single) == single
