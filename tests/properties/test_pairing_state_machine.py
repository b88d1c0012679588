"""Strict tool-call pairing in the transcript (M3), against a plain Python model (hypothesis).

The machine drives :class:`~tidings.records.transcript.ConversationTx` directly, one unit of
work per
step, on a real SQLite file (a fresh one per example, with its own event loop): user and
assistant messages, assistant tool calls, results for open calls and for unknown or answered
ones, steers (results for some of the open calls, then a user message, in one unit) and stops
(every open call answered ``cancelled``). Each write must be accepted exactly when pairing
holds; a refused unit raises :class:`~tidings.errors.PairingViolationError` and changes nothing.
After every step the committed transcript never puts a user or assistant message between a
call and its result, and equals the model.

Call ids come from a small pool, so an answered id is used again by a later assistant message,
as a real model's derived ids are.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tests.conftest import Backend
from tidings import ManualClock, PairingViolationError, Profile, Store, Tx, open_store
from tidings.conversations.catalog import Conversations
from tidings.models.base import ToolCall
from tidings.records.rows import message_from_row
from tidings.records.transcript import ConversationTx
from tidings.types import Message

T = TypeVar("T")
CALL_IDS = tuple(f"call_{i}" for i in range(6))
texts = st.text(
    st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=12
)
Write = Callable[[ConversationTx], object]


@dataclass(frozen=True)
class Expected:
    """One message as the model predicts it."""

    role: str
    content: str
    calls: tuple[str, ...] = ()
    answers: str | None = None
    status: str | None = None


def committed(messages: Sequence[Message]) -> list[Expected]:
    return [
        Expected(m.role, m.content, tuple(c["call_id"] for c in m.tool_calls), m.tool_call_id,
                 m.meta.get("status"))
        for m in messages
    ]


def assert_paired(messages: Sequence[Expected]) -> set[str]:
    """Every call is followed by its results before any other user or assistant message.

    Returns the calls left open at the end (only the last exchange may still be open).
    """
    pending: set[str] = set()
    for m in messages:
        if m.role == "tool":
            assert m.answers in pending, f"result for {m.answers!r}, which is not open"
            pending.discard(m.answers)
            continue
        assert not pending, f"a {m.role} message between calls {sorted(pending)} and results"
        pending = set(m.calls)
        assert len(pending) == len(m.calls)
    return pending


async def write_unit(store: Store, conversation_id: str, clock: ManualClock,
                     writes: Sequence[Write]) -> None:
    def unit(tx: Tx) -> None:
        cx = ConversationTx.lock(tx, conversation_id, clock)
        for write in writes:
            write(cx)
        cx.save()

    await store.transact(unit, route=conversation_id)


async def read_state(store: Store, conversation_id: str) -> tuple[list[Message], list[str]]:
    def unit(tx: Tx) -> tuple[list[Message], list[str]]:
        rows = tx.all("transcript", conversation_id=conversation_id, after_seq=0, limit=10_000)
        calls = tx.all("open_tool_calls", conversation_id=conversation_id)
        return [message_from_row(r) for r in rows], [c["call_id"] for c in calls]

    return await store.read(unit)


def user(content: str) -> Write:
    return lambda cx: cx.append_user(content)


def assistant(content: str, calls: Sequence[str] = ()) -> Write:
    tool_calls = [ToolCall(c, "probe", {"n": i}) for i, c in enumerate(calls)]
    return lambda cx: cx.append_assistant(content, tool_calls=tool_calls)


def result(call_id: str, content: str, status: str | None = None) -> Write:
    meta = {} if status is None else {"status": status}
    return lambda cx: cx.append_tool_result(call_id, content, tool_name="probe", meta=meta)


class PairingMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.runner = asyncio.Runner()
        self.dir = Path(tempfile.mkdtemp(prefix="tidings-pairing-"))
        self.clock = ManualClock()
        self.store: Store = self.run(open_store(str(self.dir / "tidings.db")))
        created = self.run(Conversations(self.store, self.clock).create(
            "owner", Profile(model="scripted")))
        self.conversation_id: str = created.conversation_id
        self.expected: list[Expected] = []
        self.open: list[str] = []  # open call ids, in call order

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.runner.run(coro)

    def teardown(self) -> None:
        try:
            self.run(self.store.close())
        finally:
            self.runner.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- plumbing ------------------------------------------------------------------------------

    def attempt(self, writes: Sequence[Write], accepted: bool, added: Sequence[Expected],
                label: str) -> None:
        """Run ``writes`` as one unit; it must be accepted exactly when ``accepted``."""
        event(f"{label}: {'accepted' if accepted else 'refused'}")
        before = self.run(read_state(self.store, self.conversation_id))
        unit = write_unit(self.store, self.conversation_id, self.clock, writes)
        if not accepted:
            with pytest.raises(PairingViolationError) as caught:
                self.run(unit)
            assert caught.value.code == "pairing_violation"
            after = self.run(read_state(self.store, self.conversation_id))
            assert len(after[0]) == len(before[0])  # the refused unit changed nothing
            assert after == before
            return
        self.run(unit)
        self.expected.extend(added)
        for m in added:
            if m.role == "tool":
                self.open.remove(m.answers)  # type: ignore[arg-type]
            elif m.calls:
                self.open = list(m.calls)

    # -- rules ---------------------------------------------------------------------------------

    @rule(content=texts, calls=st.lists(st.sampled_from(CALL_IDS), min_size=1, max_size=3))
    def append_assistant_calls(self, content: str, calls: list[str]) -> None:
        """One to three calls; now and then one id twice in a message, which is refused."""
        if len(set(calls)) != len(calls):
            self.attempt([assistant(content, calls)], False, [], "duplicate call ids")
            return
        self.attempt([assistant(content, calls)], not self.open,
                     [Expected("assistant", content, tuple(calls))], "tool calls")

    @precondition(lambda self: self.open)
    @rule(data=st.data(), content=texts)
    def answer_open_call(self, data: st.DataObject, content: str) -> None:
        call = data.draw(st.sampled_from(self.open), label="open call")
        self.attempt([result(call, content)], True,
                     [Expected("tool", content, answers=call)], "result")

    @rule(data=st.data(), content=texts)
    def answer_unknown_or_answered_call(self, data: st.DataObject, content: str) -> None:
        closed = [c for c in (*CALL_IDS, "never_called") if c not in self.open]
        call = data.draw(st.sampled_from(closed), label="closed call")
        self.attempt([result(call, content)], False, [], "result for a closed call")

    @precondition(lambda self: self.open)
    @rule(data=st.data(), content=texts)
    def answer_the_same_call_twice(self, data: st.DataObject, content: str) -> None:
        call = data.draw(st.sampled_from(self.open), label="open call")
        self.attempt([result(call, content), result(call, content)], False, [],
                     "two results for one call")

    @rule(data=st.data(), content=texts)
    def steer(self, data: st.DataObject, content: str) -> None:
        """Results for some open calls, then a person's steer, in one unit: only after all of
        them is it a safe point (a refused unit rolls back even the results it wrote first)."""
        answered = data.draw(
            st.lists(st.sampled_from(self.open), unique=True) if self.open else st.just([]),
            label="answered first",
        )
        added = [Expected("tool", f"r-{c}", answers=c) for c in answered]
        added.append(Expected("user", content))
        self.attempt([*(result(c, f"r-{c}") for c in answered), user(content)],
                     set(answered) == set(self.open), added,
                     "steer after all results" if self.open else "steer, nothing open")

    @precondition(lambda self: self.open)
    @rule()
    def stop(self) -> None:
        """A stopped turn answers every open call ``cancelled``, in one unit."""
        added = [Expected("tool", "cancelled", answers=c, status="cancelled") for c in self.open]
        self.attempt([result(c, "cancelled", "cancelled") for c in self.open], True, added,
                     "stop")

    @precondition(lambda self: len(self.open) >= 2)
    @rule(content=texts)
    def answer_one_then_assistant(self, content: str) -> None:
        first = self.open[0]
        self.attempt([result(first, "partial"), assistant(content)], False, [],
                     "assistant after a partial answer")

    @rule(content=texts)
    def append_user(self, content: str) -> None:
        self.attempt([user(content)], not self.open, [Expected("user", content)], "user")

    @rule(content=texts)
    def append_assistant_text(self, content: str) -> None:
        self.attempt([assistant(content)], not self.open, [Expected("assistant", content)],
                     "assistant")

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def transcript_is_paired(self) -> None:
        messages, open_calls = self.run(read_state(self.store, self.conversation_id))
        got = committed(messages)
        assert got == self.expected
        assert assert_paired(got) == set(self.open)
        assert sorted(open_calls) == sorted(self.open)
        assert [m.seq for m in messages] == list(range(1, len(messages) + 1))  # gap-free


def test_m3_pairing_state_machine() -> None:
    run_state_machine_as_test(
        PairingMachine,
        settings=settings(
            max_examples=60,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


async def test_m3_pairing_refused_on_both_backends(backend: Backend) -> None:
    clock = ManualClock()
    store = await open_store(backend.url)
    try:
        created = await Conversations(store, clock).create("alice", Profile(model="scripted"))
        conv = created.conversation_id

        async def write(*writes: Write) -> None:
            await write_unit(store, conv, clock, writes)

        await write(user("run the probes"))
        await write(assistant("", ["c1", "c2"]))
        before = await read_state(store, conv)
        assert before[1] == ["c1", "c2"]
        for refused in (
            [user("a steer between a call and its result")],
            [assistant("an answer before the results")],
            [assistant("more calls", ["c3"])],
            [result("c1", "one"), user("a steer after only one result")],
            [result("c1", "one"), result("c2", "two"), result("c1", "again")],
            [result("c9", "unknown call")],
        ):
            with pytest.raises(PairingViolationError) as caught:
                await write(*refused)
            assert caught.value.code == "pairing_violation"
            assert await read_state(store, conv) == before  # the whole unit rolled back

        await write(result("c1", "one"), result("c2", "two"), user("the steer, now safe"))
        with pytest.raises(PairingViolationError):
            await write(result("c1", "answered already"))
        await write(assistant("done"))
        messages, open_calls = await read_state(store, conv)
        assert open_calls == []
        assert [(m.role, m.content) for m in messages] == [
            ("user", "run the probes"),
            ("assistant", ""),
            ("tool", "one"),
            ("tool", "two"),
            ("user", "the steer, now safe"),
            ("assistant", "done"),
        ]
        assert assert_paired(committed(messages)) == set()
    finally:
        await store.close()
