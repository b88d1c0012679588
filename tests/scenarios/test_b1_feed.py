"""B1: watch it think. The answer a model is writing reaches a library watcher piece by piece,
then its committed message with the whole text; a watcher that joins mid-answer gets the
history, the answer so far as one piece, then the rest, never a character twice; text that
will never commit is withdrawn; and the feed's committed messages carry everything a chat
needs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

import pytest

from tests.conftest import RuntimeFactory
from tests.feeding import (
    WITHIN_S,
    Collector,
    Pieces,
    assembled,
    committed,
    deltas,
    journal,
    turn_ended,
)
from tests.waiting import wait_until
from tidings import (
    Author,
    AuthorKind,
    FeedEvent,
    Origin,
    Profile,
    Rule,
    Runtime,
    RuntimeConfig,
    ScriptedModel,
    StartKind,
    Tool,
    ToolContext,
    TurnConfig,
    UnknownConversationError,
)
from tidings.conversations import journal as journal_of_conversation
from tidings.errors import ModelError, ModelErrorKind
from tidings.feed import Watch, channel
from tidings.models.base import DeltaCallback, ModelReply, ModelRequest
from tidings.records.transcript import ConversationTx
from tidings.store import Tx

OWNER = "alice"
STORY = "Once upon a time, a kernel kept every promise it made, even across a crash."


def story_model() -> ScriptedModel:
    return ScriptedModel(rules=[
        Rule({"text_contains": "story"}, {"text": STORY, "chunks": 8, "chunk_delay": 0.005}),
    ])


async def open_conversation(rt: Runtime, tools: tuple[str, ...] = ()) -> str:
    conversation = await rt.create_conversation(OWNER, Profile(model="scripted", tools=tools))
    return conversation.conversation_id


def discarded(events: list[FeedEvent]) -> list[dict[str, Any]]:
    return [e.data for e in events if e.type == "message_discarded"]


async def test_b1_deltas_reach_a_watcher_in_order_then_the_committed_message(
    runtimes: RuntimeFactory,
) -> None:
    rt = await runtimes(models=[story_model()])
    conv = await open_conversation(rt)
    watcher = Collector(rt.watch(conv, owner=OWNER))
    await rt.post(conv, "tell me a story", owner=OWNER)
    events = await watcher.until(turn_ended, what="the turn's end")

    live = [e for e in events if e.seq is None]
    # The model's eight pieces: one delta each, unless the watcher fell behind (a loaded
    # machine), when pieces waiting together go out as one.
    assert 1 <= len(live) <= 8
    assert {e.type for e in live} == {"message_delta"}
    assert assembled(events) == STORY
    [run] = await rt.runs.list(conv)
    assert {(e.run_id, e.data["run_id"], e.data["step"]) for e in live} == {
        (run.run_id, run.run_id, 1)}
    # The committed message follows the last piece and replaces the text in progress.
    [answer] = committed(events, "assistant")
    assert (answer["content"], answer["run_id"], answer["step"]) == (STORY, run.run_id, 1)
    last_delta = max(i for i, e in enumerate(events) if e.type == "message_delta")
    assert events.index(next(e for e in events if e.type == "message_committed"
                             and e.data["message"]["role"] == "assistant")) > last_delta
    # The journal part is the journal, gap-free and once.
    seqs = [e.seq for e in journal(events)]
    assert seqs == list(range(1, len(seqs) + 1))
    assert [(e.seq, e.type) for e in journal(events)] == [
        (e.seq, e.type) for e in await rt.events(conv, owner=OWNER)]
    await watcher.stop()


async def test_b1_a_watcher_that_fell_behind_gets_the_queued_pieces_as_one_delta(
    runtimes: RuntimeFactory,
) -> None:
    model = Pieces(["Once ", "upon ", "a ", "time."])
    rt = await runtimes(models=[model])
    conv = await open_conversation(rt)
    watch = rt.watch(conv, owner=OWNER)
    assert isinstance(watch, Watch)
    events: list[FeedEvent] = []

    async def read_until(done: Callable[[list[FeedEvent]], bool]) -> None:
        while not done(events):
            events.append(await asyncio.wait_for(anext(watch), 10))

    await read_until(lambda es: bool(es))  # joined: from now on everything queues for it
    await rt.post(conv, "tell me a story", owner=OWNER)
    await read_until(lambda es: assembled(es) == "Once ")
    model.allow(2)  # two more pieces while nobody reads
    await wait_until(lambda: [t for _, t in rt.feed.drafts_of(conv)] == ["Once upon a "],
                     what="two more pieces written")
    before = len(events)
    await read_until(lambda es: assembled(es) == "Once upon a ")
    # The two pieces that queued come as one delta, where the last one ended.
    assert deltas(events[before:]) == [(5, "upon a ")]
    model.allow()
    await read_until(turn_ended)
    [answer] = committed(events, "assistant")
    assert answer["content"] == "Once upon a time."
    await watch.aclose()


async def test_b1_a_watcher_joining_mid_answer_gets_history_the_text_so_far_then_the_rest(
    runtimes: RuntimeFactory,
) -> None:
    model = Pieces(["Once ", "upon ", "a time."])
    rt = await runtimes(models=[model])
    conv = await open_conversation(rt)
    first = Collector(rt.watch(conv, owner=OWNER))
    await rt.post(conv, "tell me a story", owner=OWNER)
    await first.until(lambda events: assembled(events) == "Once ", what="the first piece")
    model.allow()
    await first.until(lambda events: assembled(events) == "Once upon ", what="the second")

    # A watcher from the start, and one that resumes after the turn's start: each gets its
    # part of the journal, then ONE delta at offset 0 with everything written so far.
    started = max(e.seq or 0 for e in journal(first.events) if e.type == "turn_status")
    late = Collector(rt.watch(conv, owner=OWNER))
    resumed = Collector(rt.watch(conv, after_seq=started, owner=OWNER))
    for watcher in (late, resumed):
        await watcher.until(lambda events: deltas(events), what="the text so far")
    model.allow()
    for watcher in (first, late, resumed):
        await watcher.until(turn_ended, what="the turn's end")

    assert deltas(first.events) == [(0, "Once "), (5, "upon "), (10, "a time.")]
    assert deltas(late.events) == [(0, "Once upon "), (10, "a time.")]
    assert deltas(resumed.events) == [(0, "Once upon "), (10, "a time.")]
    whole = [(e.seq, e.type) for e in journal(first.events)]
    assert [(e.seq, e.type) for e in journal(late.events)] == whole
    assert [(e.seq, e.type) for e in journal(resumed.events)] == [
        (seq, kind) for seq, kind in whole if (seq or 0) > started]
    # The text so far came after the history it follows (the turn's start).
    snapshot_at = next(i for i, e in enumerate(late.events) if e.type == "message_delta")
    assert any(e.type == "turn_status" for e in late.events[:snapshot_at])
    for watcher in (first, late, resumed):
        assert committed(watcher.events, "assistant")[0]["content"] == "Once upon a time."
        await watcher.stop()


async def test_b1_a_stopped_turns_partial_text_is_discarded(runtimes: RuntimeFactory) -> None:
    model = Pieces(["I will never finish"], hang=True)
    rt = await runtimes(models=[model])
    conv = await open_conversation(rt)
    watcher = Collector(rt.watch(conv, owner=OWNER))
    await rt.post(conv, "talk forever", owner=OWNER)
    await watcher.until(lambda events: deltas(events), what="the first piece")
    await rt.stop(conv, owner=OWNER)
    events = await watcher.until(lambda events: turn_ended(events, "stopped"), what="the stop")

    [run] = await rt.runs.list(conv)
    assert discarded(events) == [{"run_id": run.run_id, "step": 1, "reason": "stopped"}]
    assert committed(events, "assistant") == []
    assert [m.role for m in await rt.transcript(conv)] == ["user"]
    # A watcher that comes later never sees that text: it was never committed.
    later = Collector(rt.watch(conv, owner=OWNER))
    await later.until(lambda events: turn_ended(events, "stopped"), what="the history")
    assert [e for e in later.events if e.seq is None] == []
    await watcher.stop()
    await later.stop()


async def test_b1_a_failing_models_partial_text_is_discarded(runtimes: RuntimeFactory) -> None:
    model = ScriptedModel(rules=[Rule(
        {"text_contains": "fail"},
        {"text": "I was about to say", "chunks": 3, "error": "permanent"},
    )])
    rt = await runtimes(models=[model])
    conv = await open_conversation(rt)
    watcher = Collector(rt.watch(conv, owner=OWNER))
    await rt.post(conv, "please fail", owner=OWNER)
    events = await watcher.until(lambda events: turn_ended(events, "failed"), what="failure")

    assert assembled(events) == "I was about to say"
    [run] = await rt.runs.list(conv)
    assert discarded(events) == [{"run_id": run.run_id, "step": 1, "reason": "model_permanent"}]
    last_delta = max(i for i, e in enumerate(events) if e.type == "message_delta")
    assert events.index(next(e for e in events if e.type == "message_discarded")) > last_delta
    assert committed(events, "assistant") == []
    await watcher.stop()


async def test_b1_a_timed_out_calls_partial_text_is_discarded(runtimes: RuntimeFactory) -> None:
    model = Pieces(["Thinking about it"], hang=True)
    config = RuntimeConfig(turns=TurnConfig(model_timeout=timedelta(milliseconds=200),
                                            model_attempts=1))
    rt = await runtimes(models=[model], config=config)
    conv = await open_conversation(rt)
    watcher = Collector(rt.watch(conv, owner=OWNER))
    await rt.post(conv, "take your time", owner=OWNER)
    events = await watcher.until(lambda events: turn_ended(events, "needs_attention"),
                                 what="the run to need attention")
    [run] = await rt.runs.list(conv)
    assert assembled(events) == "Thinking about it"
    assert discarded(events) == [{"run_id": run.run_id, "step": 1, "reason": "timed_out"}]
    assert committed(events, "assistant") == []
    await watcher.stop()


class FailsOnce:
    """Breaks off mid-answer once (a retryable failure), then answers in full."""

    name = "scripted"

    def __init__(self) -> None:
        self.calls = 0

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
    ) -> ModelReply:
        self.calls += 1
        assert on_delta is not None
        if self.calls == 1:
            on_delta("Half an ans")
            raise ModelError(ModelErrorKind.RETRYABLE, "connection reset", model=self.name)
        on_delta("A whole ")
        on_delta("answer.")
        return ModelReply("A whole answer.", model=request.model)


async def test_b1_a_retried_call_withdraws_its_text_and_starts_the_step_again(
    runtimes: RuntimeFactory,
) -> None:
    config = RuntimeConfig(turns=TurnConfig(retry_base=timedelta(0)))
    rt = await runtimes(models=[FailsOnce()], config=config)
    conv = await open_conversation(rt)
    watcher = Collector(rt.watch(conv, owner=OWNER))
    await rt.post(conv, "answer me", owner=OWNER)
    events = await watcher.until(turn_ended, what="the turn's end")

    [run] = await rt.runs.list(conv)
    live = [(e.type, e.data.get("offset"), e.data.get("text"), e.data.get("reason"))
            for e in events if e.seq is None]
    assert live[:2] == [
        ("message_delta", 0, "Half an ans", None),
        ("message_discarded", None, None, "model_retryable"),
    ]
    again = [e for e in events if e.seq is None][2:]
    assert {e.type for e in again} == {"message_delta"}
    assert again[0].data["offset"] == 0  # the step starts again at 0
    assert assembled(again) == "A whole answer."
    assert committed(events, "assistant")[0]["content"] == "A whole answer."
    assert {e.data["step"] for e in events if e.seq is None} == {1}
    assert run.status.value == "completed"
    await watcher.stop()


def kernel_mail(rt: Runtime, conversation_id: str, content: str) -> Any:
    def unit(tx: Tx) -> None:
        cx = ConversationTx.lock(tx, conversation_id, rt.clock)
        rt.door.deliver(cx, content, origin=Origin.TASK_RESULT,
                        authored_by=Author(AuthorKind.AGENT, "kernel", "kernel"),
                        sender_conversation_id=None, run_public_id="run_source",
                        task_key="task-1")
        cx.save()

    return rt.store.transact(unit, route=conversation_id)


async def lookup(ctx: ToolContext, args: Mapping[str, Any]) -> str:
    return f"found {args['what']}"


async def test_b1_committed_messages_carry_role_text_tool_calls_results_and_origin(
    runtimes: RuntimeFactory,
) -> None:
    model = ScriptedModel(rules=[
        Rule({"text_contains": "look it up"},
             {"text": "Looking.", "tool_calls": [{"name": "lookup",
                                                  "arguments": {"what": "the answer"}}]}),
        Rule({"tool_result": "lookup"}, {"text": "It is 42."}),
        Rule({"origin": "task_result"}, {"text": "Noted the task."}),
        Rule({"origin": "agent"}, {"text": "Hello, agent."}),
    ])
    tool = Tool("lookup", "Looks something up.", lookup,
                parameters={"type": "object", "properties": {"what": {"type": "string"}}})
    rt = await runtimes(models=[model], tools=[tool])
    conv = await open_conversation(rt, tools=("lookup",))
    watcher = Collector(rt.watch(conv, owner=OWNER))
    await rt.post(conv, "look it up", owner=OWNER)
    await rt.settle(conv)
    await kernel_mail(rt, conv, "task-1 finished: ok")
    rt.coordinator.request(conv, StartKind.MAIL)
    await rt.settle(conv)
    await rt.post(conv, "hi from a bot", origin=Origin.AGENT,
                  authored_by=Author(AuthorKind.AGENT, "bot", "Bot"), owner=OWNER)
    await rt.settle(conv)
    events = await watcher.until(
        lambda events: len(committed(events, "assistant")) == 4, what="four answers")

    messages = [e.data for e in events if e.type == "message_committed"]
    transcript = await rt.transcript(conv, owner=OWNER)
    assert [m["message"]["seq"] for m in messages] == [m.seq for m in transcript]
    assert [m["message"]["message_id"] for m in messages] == [m.message_id for m in transcript]
    shown = [(m["message"]["role"], m["message"]["content"], m["message"]["origin"],
              m["by_runtime"]) for m in messages]
    assert shown == [
        ("user", "look it up", "person", False),
        ("assistant", "Looking.", None, False),
        ("tool", "found the answer", None, False),
        ("assistant", "It is 42.", None, False),
        ("user", "task-1 finished: ok", "task_result", True),  # the kernel's words
        ("assistant", "Noted the task.", None, False),
        ("user", "hi from a bot", "agent", True),  # an agent's words, not a person's
        ("assistant", "Hello, agent.", None, False),
    ]
    call = messages[1]["message"]
    assert call["tool_calls"] == [{"call_id": transcript[1].tool_calls[0]["call_id"],
                                   "name": "lookup", "arguments": {"what": "the answer"}}]
    result = messages[2]["message"]
    assert (result["tool_call_id"], result["tool_name"]) == (
        call["tool_calls"][0]["call_id"], "lookup")
    runs = await rt.runs.list(conv)
    assert [m["message"]["run_id"] for m in messages] == [
        runs[0].run_id, runs[0].run_id, runs[0].run_id, runs[0].run_id,
        runs[1].run_id, runs[1].run_id, runs[2].run_id, runs[2].run_id]
    assert messages[0]["message"]["input_id"] == transcript[0].input_id is not None
    assert [m["message"]["step"] for m in messages if m["message"]["role"] == "assistant"] == [
        1, 2, 1, 1]
    # Every read serves them so: the events page too, from the transcript, the text once.
    assert [e.data for e in await rt.events(conv, owner=OWNER)
            if e.type == "message_committed"] == messages
    stored = await rt.store.read(lambda tx: tx.all(
        "events_after", conversation_id=conv, after_seq=0, limit=1000))
    assert [json.loads(r["data"]) for r in stored if r["type"] == "message_committed"] == [
        {"message_seq": m.seq} for m in transcript]
    await watcher.stop()


async def test_b1_an_accepted_input_carries_its_text_at_once(runtimes: RuntimeFactory) -> None:
    rt = await runtimes(models=[story_model()])
    conv = await open_conversation(rt)
    watcher = Collector(rt.watch(conv, owner=OWNER))
    posted = await rt.post(conv, "tell me a story", owner=OWNER)
    await kernel_mail(rt, conv, "task-1 finished")
    events = await watcher.until(
        lambda es: len([e for e in es if e.type == "input_accepted"]) == 2, what="two inputs")
    person, notice = [e.data for e in events if e.type == "input_accepted"]
    # A chat UI shows the person's words before the answer streams, and marks the notice.
    assert (person["input_id"], person["content"], person["by_runtime"]) == (
        posted.input_id, "tell me a story", False)
    assert (notice["content"], notice["by_runtime"], notice["origin"]) == (
        "task-1 finished", True, "task_result")
    kinds = [e.type for e in events]
    if "message_delta" in kinds:
        assert kinds.index("input_accepted") < kinds.index("message_delta")
    # The same on a plain read of the journal.
    read = [e.data for e in await rt.events(conv, owner=OWNER) if e.type == "input_accepted"]
    assert [d["content"] for d in read] == ["tell me a story", "task-1 finished"]
    await watcher.stop()


async def test_b1_watch_is_owner_scoped(runtimes: RuntimeFactory) -> None:
    rt = await runtimes(models=[story_model()])
    conv = await open_conversation(rt)
    for feed in (rt.watch(conv, owner="mallory"), rt.watch("conv_unknown", owner=OWNER)):
        with pytest.raises(UnknownConversationError):
            await anext(feed)


async def test_b1_watch_ends_when_the_conversation_is_deleted_or_the_runtime_closes(
    runtimes: RuntimeFactory,
) -> None:
    rt = await runtimes(models=[story_model()])
    conv, other = await open_conversation(rt), await open_conversation(rt)
    deleted = Collector(rt.watch(conv, owner=OWNER))
    open_one = Collector(rt.watch(other, owner=OWNER))
    await deleted.until(lambda events: journal(events), what="the history")
    await rt.conversations.tombstone(conv, owner=OWNER)
    events = await deleted.ended()
    assert events[-1].type == "conversation_status"
    assert events[-1].data == {"status": "tombstoned"}
    await open_one.until(lambda events: journal(events), what="the history")
    await rt.close()
    await open_one.ended()


def counted_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The conversations whose journal the feed's readers read, one entry per read."""
    reads: list[str] = []
    read_events = journal_of_conversation.read_events

    def counted(tx: Tx, conversation_id: str, **kwargs: Any) -> Any:
        reads.append(conversation_id)
        return read_events(tx, conversation_id, **kwargs)

    monkeypatch.setattr(channel, "read_events", counted)
    return reads


async def test_b1_many_watchers_of_one_conversation_share_one_reader(
    runtimes: RuntimeFactory, monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads = counted_reads(monkeypatch)
    config = RuntimeConfig(feed_poll=timedelta(hours=1))  # only the hints read
    rt = await runtimes(models=[story_model()], config=config)
    conv = await open_conversation(rt)
    watchers = [Collector(rt.watch(conv, owner=OWNER)) for _ in range(25)]
    for watcher in watchers:
        await watcher.until(lambda events: journal(events), what="the history")
    await rt.post(conv, "tell me a story", owner=OWNER)
    for watcher in watchers:
        await watcher.until(turn_ended, what="the turn's end")
    # Not one read per watcher: none at all, the process's own commits are handed over.
    assert reads == []
    for watcher in watchers:
        assert assembled(watcher.events) == STORY
        assert [e.seq for e in journal(watcher.events)] == [
            e.seq for e in journal(watchers[0].events)]
        await watcher.stop()


async def test_b1_this_process_commits_reach_its_watchers_as_a_read_would_give_them(
    runtimes: RuntimeFactory, monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads = counted_reads(monkeypatch)
    model = ScriptedModel(rules=[
        Rule({"text_contains": "look it up"},
             {"text": "Looking.", "tool_calls": [{"name": "lookup",
                                                  "arguments": {"what": "the \u00e9l\u00e8ve"}}]}),
        Rule({"tool_result": "lookup"}, {"text": "It is 42 \u2014 f\u00fcr dich."}),
        Rule({"origin": "task_result"}, {"text": "Noted the task."}),
    ])
    tool = Tool("lookup", "Looks something up.", lookup,
                parameters={"type": "object", "properties": {"what": {"type": "string"}}})
    rt = await runtimes(models=[model], tools=[tool],
                        config=RuntimeConfig(feed_poll=timedelta(hours=1)))
    conv = await open_conversation(rt, tools=("lookup",))
    watcher = Collector(rt.watch(conv, owner=OWNER))
    await watcher.until(lambda events: journal(events), what="the history")
    await rt.post(conv, "look it up, \u00e0 l\u2019\u00e9cole \U0001f600", owner=OWNER,
                  meta={"b": [1, 2], "a": {"nested": True}})
    await rt.settle(conv)
    await kernel_mail(rt, conv, "task-1 finished: ok")
    rt.coordinator.request(conv, StartKind.MAIL)
    await rt.settle(conv)
    stored = await rt.events(conv, owner=OWNER)
    events = await watcher.until(lambda events: len(journal(events)) == len(stored),
                                 what="the whole journal")
    # The events handed over are those the journal reads back: every field, the messages and
    # the inputs' text filled in alike.
    assert [(e.seq, e.type, e.run_id, e.data, e.at_us) for e in journal(events)] == [
        (e.seq, e.type, e.run_id, e.data, e.at_us) for e in stored]
    assert any(e.type == "input_accepted" and e.data.get("content") for e in stored)
    assert len([e for e in stored if e.type == "message_committed"]) == 6
    assert reads == []  # every commit was this process's: nothing was read back
    await watcher.stop()


async def test_b1_a_watcher_that_leaves_its_loop_is_let_go(runtimes: RuntimeFactory) -> None:
    rt = await runtimes(models=[story_model()])
    conv = await open_conversation(rt)
    async for _ in rt.watch(conv, owner=OWNER):
        break  # without closing it: dropping the watch is enough
    await wait_until(lambda: conv not in rt.feed.watched, what="the reader of a left watch")
    closed = rt.watch(conv, owner=OWNER)
    await anext(closed)
    assert conv in rt.feed.watched
    await closed.aclose()
    assert conv not in rt.feed.watched


@pytest.mark.parametrize("first", ["watch", "reader", "cursor"])
async def test_b1_a_watcher_gets_the_last_rows_whichever_read_comes_first(
    runtimes: RuntimeFactory, monkeypatch: pytest.MonkeyPatch, first: str,
) -> None:
    """A new watch reads its backlog while the conversation's reader finds where to start,
    each on its own snapshot. Rows committed between the two, after which the conversation
    falls quiet (here a run holding on a call a person must decide: no answer is being
    written, nothing more commits), still reach the watcher: when the watch's read ends
    first, the reader starts where it ended; when the reader's start passed rows the watch's
    read had not reached, the watch reads on. (The slow poll is off: it would only hint rows
    the reader had passed already.)"""
    gate, headed = asyncio.Event(), asyncio.Event()
    head = channel.Channel._head

    async def late_head(self: channel.Channel) -> int:
        await gate.wait()
        try:
            return await head(self)
        finally:
            headed.set()

    async def deploy(context: ToolContext, arguments: Mapping[str, Any]) -> str:
        return "deployed"

    monkeypatch.setattr(channel.Channel, "_head", late_head)
    model = ScriptedModel(rules=[Rule({"text_contains": "deploy it"}, {
        "tool_calls": [{"name": "deploy", "arguments": {"target": "prod"}}]})])
    rt = await runtimes(models=[model], tools=[Tool("deploy", "Deploy.", deploy)],
                        config=RuntimeConfig(feed_poll=timedelta(hours=1)))
    conv = (await rt.create_conversation(OWNER, Profile(
        model="scripted", tools=("deploy",), approval_mode="writes"))).conversation_id
    release, snapshot = asyncio.Event(), asyncio.Event()
    reads = 0

    async def read(after: int) -> list[Any]:
        nonlocal reads
        reads += 1
        page = await rt.events(conv, after_seq=after, owner=OWNER)
        if reads == 1:  # the first read's snapshot is taken now; it answers when released
            snapshot.set()
            if first == "reader":
                await release.wait()
        return list(page)

    if first == "cursor":  # a client's cursor from elsewhere, past this journal's end, first
        ahead = Collector(rt.watch(conv, after_seq=10_000, owner=OWNER))
        await wait_until(lambda: bool(rt.feed.watched), what="the first watch joined")
    watcher = Collector(rt.feed.watch(conv, after_seq=0, read=read))
    await asyncio.wait_for(snapshot.wait(), WITHIN_S)
    await watcher.until(lambda events: first == "reader" or journal(events),
                        what="the backlog")
    await rt.post(conv, "deploy it", owner=OWNER)
    [held] = await asyncio.wait_for(rt.settle(conv), WITHIN_S)  # nothing more will commit
    assert held.status.value == "awaiting_approval"
    gate.set()
    if first == "reader":  # the reader has its start, the journal's head, before the read ends
        await asyncio.wait_for(headed.wait(), WITHIN_S)
    release.set()
    events = await watcher.until(
        lambda events: turn_ended(events, "awaiting_approval"), what="the held call")
    whole = await rt.events(conv, after_seq=0, owner=OWNER)
    assert [e.seq for e in journal(events)] == [e.seq for e in whole]
    assert journal(events)[-1].data["approvals"] == [
        a.approval_id for a in await rt.approvals.list(conv, owner=OWNER)]
    await watcher.stop()
    if first == "cursor":
        assert not journal(ahead.events)
        await ahead.stop()
