"""Pure door and start policy, no database: read order (M2), text admission (M1), and the start
decision (C2, C3, C4, C6, C8)."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.errors import InvalidInputError, PayloadTooLargeError
from tidings.support.policy import StartDecision, StartState, check_text, decide_start, read_order
from tidings.types import ConversationStatus, GoalStatus, Origin, StartKind

# -- M2: read order ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    """Just what read_order looks at, plus a tag to tell items apart."""

    origin: Origin
    queue_position: int
    tag: int


@st.composite
def queues(draw: st.DrawFn) -> list[Item]:
    """Queued inputs in any listing order, with unique arrival numbers."""
    origins = draw(st.lists(st.sampled_from(list(Origin)), max_size=30))
    positions = draw(
        st.lists(
            st.integers(min_value=1, max_value=10_000),
            min_size=len(origins), max_size=len(origins), unique=True,
        )
    )
    items = [Item(o, p, i) for i, (o, p) in enumerate(zip(origins, positions, strict=True))]
    return draw(st.permutations(items))


@given(queues())
def test_m2_read_order_is_a_permutation(items: list[Item]) -> None:
    ordered = read_order(items)
    assert sorted(ordered, key=lambda i: i.tag) == sorted(items, key=lambda i: i.tag)
    assert len(ordered) == len(items)


@given(queues())
def test_m2_read_order_kernel_first(items: list[Item]) -> None:
    kernel = [i.origin.is_kernel for i in read_order(items)]
    assert kernel == sorted(kernel, reverse=True)  # every kernel row before every other row


@given(queues())
def test_m2_read_order_keeps_arrival_within_each_group(items: list[Item]) -> None:
    ordered = read_order(items)
    for is_kernel in (True, False):
        group = [i for i in ordered if i.origin.is_kernel is is_kernel]
        assert [i.queue_position for i in group] == sorted(i.queue_position for i in group)
        # and the arrival numbers themselves are untouched
        assert {i.tag: i.queue_position for i in group} == {
            i.tag: i.queue_position for i in items if i.origin.is_kernel is is_kernel
        }


@given(queues(), st.randoms(use_true_random=False))
def test_m2_read_order_ignores_listing_order(items: list[Item], rng: random.Random) -> None:
    shuffled = list(items)
    rng.shuffle(shuffled)
    assert read_order(shuffled) == read_order(items)
    assert read_order(read_order(items)) == read_order(items)


def test_m2_read_order_example() -> None:
    items = [
        Item(Origin.PERSON, 1, 1),
        Item(Origin.AGENT, 2, 2),
        Item(Origin.CHILD, 3, 3),
        Item(Origin.PERSON, 4, 4),
        Item(Origin.TASK_RESULT, 5, 5),
    ]
    assert [i.tag for i in read_order(items)] == [3, 5, 1, 2, 4]
    assert read_order([]) == []


# -- M1: text admission ------------------------------------------------------------------------

safe_text = st.text(
    st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=50
)


@given(safe_text)
def test_m1_check_text_admits_valid_text_within_bound(value: str) -> None:
    assert check_text(value, "content", limit_bytes=len(value.encode("utf-8"))) == value


@given(safe_text.filter(lambda s: s != ""))
def test_m1_check_text_bound_is_in_utf8_bytes(value: str) -> None:
    size = len(value.encode("utf-8"))
    with pytest.raises(PayloadTooLargeError) as caught:
        check_text(value, "content", limit_bytes=size - 1)
    assert caught.value.size_bytes == size
    assert caught.value.limit_bytes == size - 1
    assert caught.value.code == "payload_too_large"


@given(safe_text, safe_text)
def test_m1_check_text_refuses_nul_anywhere(head: str, tail: str) -> None:
    with pytest.raises(InvalidInputError, match="NUL"):
        check_text(f"{head}\x00{tail}", "content", limit_bytes=10_000)


@given(safe_text, st.integers(min_value=0xD800, max_value=0xDFFF), safe_text)
def test_m1_check_text_refuses_lone_surrogates(head: str, code: int, tail: str) -> None:
    with pytest.raises(InvalidInputError, match="UTF-8") as caught:
        check_text(f"{head}{chr(code)}{tail}", "content", limit_bytes=10_000)
    assert not isinstance(caught.value, PayloadTooLargeError)


@pytest.mark.parametrize("value", [None, 42, 4.2, b"bytes", ["a"], {"a": "b"}])
def test_m1_check_text_refuses_non_strings(value: object) -> None:
    with pytest.raises(InvalidInputError, match="must be a string"):
        check_text(value, "content", limit_bytes=100)


def test_m1_check_text_multibyte_boundary() -> None:
    assert check_text("é" * 50, "content", limit_bytes=100) == "é" * 50
    with pytest.raises(PayloadTooLargeError):
        check_text("é" * 51, "content", limit_bytes=100)  # 51 characters, 102 bytes
    assert check_text("", "content", limit_bytes=0) == ""  # blankness is the door's call


# -- C2/C3/C4/C6/C8: the start decision --------------------------------------------------------

IDLE = StartState(
    status=ConversationStatus.ACTIVE,
    goal_status=GoalStatus.ACTIVE,
    suppressed=False,
    awaiting_person=False,
    slot_free=True,
    person_inputs=False,
    agent_inputs=False,
    kernel_inputs=False,
    ready_signals=False,
)
ALL_KINDS = frozenset(StartKind)


def decide(kinds: set[StartKind] | frozenset[StartKind], **state: Any) -> StartDecision:
    return decide_start(replace(IDLE, **state), frozenset(kinds))


def test_c3_deleted_conversation_yields_every_start() -> None:
    decision = decide(ALL_KINDS, status=ConversationStatus.TOMBSTONED, person_inputs=True,
                      kernel_inputs=True, ready_signals=True)
    assert decision.trigger is None
    assert decision.reason == "deleted"
    assert dict(decision.yielded) == dict.fromkeys(StartKind, "deleted")


def test_c2_slot_busy_starts_nothing_and_records_nothing() -> None:
    decision = decide(ALL_KINDS, slot_free=False, person_inputs=True, ready_signals=True)
    assert decision == StartDecision(None, "slot_busy", ())


def test_c3_person_priority_over_every_automatic_start() -> None:
    decision = decide(ALL_KINDS, person_inputs=True, agent_inputs=True, kernel_inputs=True,
                      ready_signals=True)
    assert decision.trigger is StartKind.PERSON
    assert decision.reason is None
    assert dict(decision.yielded) == {
        StartKind.WAKE: "person_priority", StartKind.GOAL: "person_priority"}


@pytest.mark.parametrize("held", [{"suppressed": True}, {"awaiting_person": True}])
def test_c6_c8_a_persons_input_is_never_held(held: dict[str, bool]) -> None:
    decision = decide({StartKind.PERSON}, person_inputs=True, **held)
    assert decision.trigger is StartKind.PERSON
    assert decision.yielded == ()


def test_c2_agent_send_before_kernel_mail_and_wake_ups() -> None:
    decision = decide({StartKind.AGENT, StartKind.MAIL, StartKind.WAKE}, agent_inputs=True,
                      kernel_inputs=True, ready_signals=True)
    assert decision.trigger is StartKind.AGENT
    assert dict(decision.yielded) == {StartKind.WAKE: "another_start_queued"}


def test_m2_kernel_mail_before_an_automatic_continuation() -> None:
    decision = decide({StartKind.MAIL, StartKind.WAKE, StartKind.GOAL}, kernel_inputs=True,
                      ready_signals=True)
    assert decision.trigger is StartKind.MAIL
    assert decision.reason is None
    assert dict(decision.yielded) == {
        StartKind.WAKE: "another_start_queued", StartKind.GOAL: "another_start_queued"}


def test_c3_another_start_queued_wake_before_goal() -> None:
    decision = decide({StartKind.WAKE, StartKind.GOAL}, ready_signals=True)
    assert decision.trigger is StartKind.WAKE
    assert dict(decision.yielded) == {StartKind.GOAL: "another_start_queued"}


def test_c2_a_recheck_starts_whatever_is_eligible() -> None:
    assert decide(set(), kernel_inputs=True).trigger is StartKind.MAIL
    assert decide(set(), ready_signals=True).trigger is StartKind.WAKE
    assert decide(set(), person_inputs=True).trigger is StartKind.PERSON
    assert decide(set()) == StartDecision(None, "nothing_to_do", ())


@pytest.mark.parametrize(
    "work", [{"kernel_inputs": True}, {"ready_signals": True}, {}], ids=["mail", "wake", "goal"]
)
def test_c6_suppressed_holds_automatic_advancement(work: dict[str, bool]) -> None:
    decision = decide({StartKind.MAIL, StartKind.WAKE, StartKind.GOAL}, suppressed=True, **work)
    assert decision.trigger is None
    assert decision.reason == "suppressed"
    assert dict(decision.yielded) == {
        StartKind.WAKE: "suppressed", StartKind.GOAL: "suppressed"}


@pytest.mark.parametrize(
    "work", [{"kernel_inputs": True}, {"ready_signals": True}, {}], ids=["mail", "wake", "goal"]
)
def test_c8_awaiting_person_holds_automatic_advancement(work: dict[str, bool]) -> None:
    decision = decide({StartKind.MAIL, StartKind.WAKE, StartKind.GOAL}, awaiting_person=True,
                      **work)
    assert decision.trigger is None
    assert decision.reason == "awaiting_person"
    assert dict(decision.yielded) == {
        StartKind.WAKE: "awaiting_person", StartKind.GOAL: "awaiting_person"}


def test_c6_suppression_named_before_awaiting_person() -> None:
    decision = decide({StartKind.WAKE}, ready_signals=True, suppressed=True, awaiting_person=True)
    assert decision.reason == "suppressed"


@pytest.mark.parametrize(
    ("goal", "reason"),
    [
        (GoalStatus.PAUSED, "goal_paused"),
        (GoalStatus.BLOCKED, "goal_blocked"),
        (GoalStatus.NONE, "goal_none"),
        (GoalStatus.DONE, "goal_done"),
    ],
)
def test_c3_goal_checkpoint_yields_unless_goal_active(goal: GoalStatus, reason: str) -> None:
    decision = decide({StartKind.GOAL}, goal_status=goal)
    assert decision == StartDecision(None, reason, ((StartKind.GOAL, reason),))


def test_c3_active_goal_checkpoint_starts() -> None:
    decision = decide({StartKind.GOAL})
    assert decision == StartDecision(StartKind.GOAL, None, ())


def test_c4_stale_wake_up_has_nothing_to_do() -> None:
    decision = decide({StartKind.WAKE})
    assert decision == StartDecision(None, "nothing_to_do", ((StartKind.WAKE, "nothing_to_do"),))


def test_c4_person_start_with_no_input_left_records_nothing() -> None:
    """A person's request whose input an earlier turn already read: nothing, and no yield."""
    assert decide({StartKind.PERSON, StartKind.AGENT, StartKind.MAIL}) == StartDecision(
        None, "nothing_to_do", ())


start_states = st.builds(
    StartState,
    status=st.sampled_from(list(ConversationStatus)),
    goal_status=st.sampled_from(list(GoalStatus)),
    suppressed=st.booleans(),
    awaiting_person=st.booleans(),
    slot_free=st.booleans(),
    person_inputs=st.booleans(),
    agent_inputs=st.booleans(),
    kernel_inputs=st.booleans(),
    ready_signals=st.booleans(),
)


@given(start_states, st.frozensets(st.sampled_from(list(StartKind))))
def test_c3_every_decision_starts_or_says_why(
    state: StartState, kinds: frozenset[StartKind]
) -> None:
    decision = decide_start(state, kinds)
    assert (decision.trigger is None) == (decision.reason is not None)
    yielded = dict(decision.yielded)
    assert len(yielded) == len(decision.yielded)  # each start yields at most once
    assert set(yielded) <= kinds
    assert decision.trigger not in yielded
    if state.status is ConversationStatus.TOMBSTONED:
        assert decision.trigger is None
        assert yielded == dict.fromkeys(kinds, "deleted")
        return
    if not state.slot_free:
        assert decision == StartDecision(None, "slot_busy", ())
        return
    # every automatic start that did not run says why; the others are never "yielded"
    assert set(yielded) == {k for k in kinds if k.automatic and k is not decision.trigger}
    if state.person_inputs:
        assert decision.trigger is StartKind.PERSON
        assert set(yielded.values()) <= {"person_priority"}
    elif state.agent_inputs:
        assert decision.trigger is StartKind.AGENT
    elif state.suppressed or state.awaiting_person:
        assert decision.trigger is None  # C6, C8: no automatic advancement
    if decision.trigger is not None and decision.trigger is not StartKind.PERSON:
        assert set(yielded.values()) <= {"another_start_queued"}
