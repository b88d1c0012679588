"""M8, M9: which arrived receipts share one supplementary reply, and whom that reply answers
for. Pure, no database."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.mail.batching import (
    MAX_BATCH_RECEIPTS,
    SNAPSHOT_LIMIT_BYTES,
    CallbackSource,
    FrozenEnvironment,
    Principals,
    Receipt,
    WorkerFinal,
    batches,
    combined_sources,
    compatible,
    next_batch,
    plan_reply,
)
from tidings.types import Author, AuthorKind, ConversationId, InputId, Origin, RunId

AUTHOR = Author(AuthorKind.HUMAN, "ada", "Ada")
PRINCIPALS = Principals(owner="ada", answerer="agent_main", authored_by=AUTHOR)
ENV = FrozenEnvironment(
    model="m-large", fallbacks=("m-small", "m-tiny"), tools=("shell", "wait"),
    approval_mode="writes",
)
RUN = RunId("run_1")
SENDER = ConversationId("conv_parent")


def receipt(position: int = 1, **changes: Any) -> Receipt:
    """A plain, batchable task_result receipt of RUN; ``changes`` replace its fields."""
    base = Receipt(
        input_id=InputId(f"in_{position}"),
        queue_position=position,
        origin=Origin.TASK_RESULT,
        principals=PRINCIPALS,
        environment=ENV,
        sender_conversation_id=SENDER,
        run_public_id=RUN,
        task_key=f"task_{position}",
        content_bytes=100,
    )
    return replace(base, **changes)


def worker_final(
    position: int, run: str, *, requester: str = "ada", memory_context: str = "mem_1",
    callback_result: str | None = "res", **changes: Any,
) -> Receipt:
    """An independent worker final (a child's reply) of run ``run``."""
    return receipt(
        position,
        origin=Origin.CHILD,
        sender_conversation_id=ConversationId(f"conv_child_{position}"),
        run_public_id=RunId(run),
        worker_final=WorkerFinal(
            requester, memory_context,
            None if callback_result is None else f"{callback_result}_{position}",
        ),
        **changes,
    )


def positions(batch: tuple[Receipt, ...]) -> list[int]:
    return [r.queue_position for r in batch]


# -- M8: the example -------------------------------------------------------------------


def test_m8_thirty_receipts_with_an_incompatible_seventh() -> None:
    arrived = [
        receipt(p, run_public_id=RunId("run_other")) if p == 7 else receipt(p)
        for p in range(1, 31)
    ]
    taken = batches(arrived)
    assert [(b[0].queue_position, b[-1].queue_position) for b in taken] == [
        (1, 6), (7, 7), (8, 23), (24, 30)
    ]
    assert [positions(b) for b in taken] == [
        list(range(1, 7)), [7], list(range(8, 24)), list(range(24, 31))
    ]
    assert next_batch(arrived) == taken[0]


def test_m8_batch_stops_at_incompatible_receipt_and_never_skips_it() -> None:
    arrived = [receipt(1), receipt(2, custom_context=True), receipt(3), receipt(4)]
    assert positions(next_batch(arrived)) == [1]  # 3 and 4 would fit, but not across 2
    assert [positions(b) for b in batches(arrived)] == [[1], [2], [3, 4]]


def test_m8_head_alone_when_nothing_else_qualifies() -> None:
    assert positions(next_batch([receipt(1)])) == [1]
    assert positions(next_batch([receipt(1, freshness_fence=True), receipt(2)])) == [1]
    assert next_batch([]) == ()
    assert batches([]) == []


def test_m8_at_most_sixteen_by_default() -> None:
    arrived = [receipt(p) for p in range(1, 41)]
    assert [len(b) for b in batches(arrived)] == [16, 16, 8]
    assert [len(b) for b in batches(arrived, limit=5)] == [5] * 8
    assert [len(b) for b in batches(arrived, limit=1)] == [1] * 40


@pytest.mark.parametrize("limit", [0, -1, MAX_BATCH_RECEIPTS + 1])
def test_m8_limit_is_between_one_and_sixteen(limit: int) -> None:
    with pytest.raises(ValueError, match="limit"):
        next_batch([receipt(1)], limit=limit)


def test_m8_total_content_bounded_by_the_snapshot_size_limit() -> None:
    size = SNAPSHOT_LIMIT_BYTES // 4
    arrived = [receipt(p, content_bytes=size) for p in range(1, 11)]
    assert [len(b) for b in batches(arrived)] == [4, 4, 2]
    # one byte over: the fourth no longer fits, and a smaller fifth is not taken around it
    arrived = [receipt(p, content_bytes=size) for p in range(1, 4)]
    arrived += [receipt(4, content_bytes=size + 1), receipt(5, content_bytes=1)]
    assert [positions(b) for b in batches(arrived)] == [[1, 2, 3], [4, 5]]


def test_m8_an_oversize_head_is_still_processed_alone() -> None:
    arrived = [receipt(1, content_bytes=SNAPSHOT_LIMIT_BYTES + 1), receipt(2), receipt(3)]
    assert [positions(b) for b in batches(arrived)] == [[1], [2, 3]]
    assert [positions(b) for b in batches(arrived, max_bytes=0)] == [[1], [2], [3]]


def test_m8_arrived_must_be_in_read_order() -> None:
    with pytest.raises(ValueError, match="read order"):
        next_batch([receipt(2), receipt(1)])
    with pytest.raises(ValueError, match="read order"):
        next_batch([receipt(1), receipt(1)])
    # gaps in the arrival numbers (a person's input between them reads later) are fine
    assert positions(next_batch([receipt(1), receipt(5), receipt(9)])) == [1, 5, 9]


# -- M8: compatibility, one dimension at a time ------------------------------------------------


def test_m8_identical_receipts_are_compatible() -> None:
    assert compatible(receipt(1), receipt(2))
    assert compatible(receipt(1), receipt(1))
    assert compatible(receipt(1, origin=Origin.CHILD), receipt(2))  # origin is not a dimension


FLIPS: dict[str, dict[str, Any]] = {
    "owner": {"principals": replace(PRINCIPALS, owner="bob")},
    "answerer": {"principals": replace(PRINCIPALS, answerer="agent_other")},
    "author_handle": {"principals": replace(PRINCIPALS, authored_by=Author(
        AuthorKind.HUMAN, "bob", "Ada"))},
    "author_kind": {"principals": replace(PRINCIPALS, authored_by=Author(
        AuthorKind.AGENT, "ada", "Ada"))},
    "model": {"environment": replace(ENV, model="m-other")},
    "fallbacks": {"environment": replace(ENV, fallbacks=("m-small",))},
    "fallback_order": {"environment": replace(ENV, fallbacks=("m-tiny", "m-small"))},
    "tools": {"environment": replace(ENV, tools=("shell",))},
    "tools_empty": {"environment": replace(ENV, tools=())},
    "approval_mode": {"environment": replace(ENV, approval_mode="always")},
    "not_visible": {"visible": False},
    "custom_context": {"custom_context": True},
    "freshness_fence": {"freshness_fence": True},
    "source_run": {"run_public_id": RunId("run_2")},
    "unknown_run": {"run_public_id": None},
    "unknown_sender": {"sender_conversation_id": None},
    "unknown_task_key": {"task_key": None},
}


@pytest.mark.parametrize("flip", list(FLIPS), ids=list(FLIPS))
def test_m8_each_dimension_flipped_alone_is_incompatible(flip: str) -> None:
    a, b = receipt(1), receipt(2, **FLIPS[flip])
    assert compatible(a, a)
    assert not compatible(a, b)
    assert not compatible(b, a)
    assert positions(next_batch([a, b, receipt(3)])) == [1]


@pytest.mark.parametrize(
    "flip", ["not_visible", "custom_context", "freshness_fence", "unknown_run",
             "unknown_sender", "unknown_task_key"],
)
def test_m8_a_receipt_that_cannot_batch_is_compatible_with_nothing(flip: str) -> None:
    odd = receipt(1, **FLIPS[flip])
    assert not odd.batchable
    assert not compatible(odd, odd)
    assert not compatible(odd, replace(odd, input_id=InputId("in_2"), queue_position=2))


def test_m8_empty_tool_list_is_not_any() -> None:
    empty = replace(ENV, tools=())
    assert empty.tools == ()
    assert not compatible(receipt(1, environment=empty), receipt(2))
    assert compatible(receipt(1, environment=empty), receipt(2, environment=empty))
    with pytest.raises(TypeError, match="explicit"):
        FrozenEnvironment(model="m", fallbacks=(), tools=None, approval_mode="never")  # type: ignore[arg-type]


def test_m8_tools_compare_as_a_set() -> None:
    shuffled = replace(ENV, tools=("wait", "shell", "wait"))
    assert shuffled == ENV
    assert compatible(receipt(1, environment=shuffled), receipt(2))


def test_m8_author_display_name_is_a_label_not_a_principal() -> None:
    renamed = replace(PRINCIPALS, authored_by=Author(AuthorKind.HUMAN, "ada", "Ada L."))
    assert compatible(receipt(1, principals=renamed), receipt(2))


def test_m8_a_receipt_is_kernel_mail() -> None:
    for origin in (Origin.PERSON, Origin.AGENT):
        with pytest.raises(ValueError, match="kernel mail"):
            receipt(1, origin=origin)
    with pytest.raises(ValueError, match="content_bytes"):
        receipt(1, content_bytes=-1)


# -- M8: independent worker finals -------------------------------------------------------------


def test_m8_worker_finals_may_cross_source_runs_when_requester_memory_environment_match() -> None:
    a, b = worker_final(1, "run_a"), worker_final(2, "run_b")
    assert compatible(a, b)
    assert positions(next_batch([a, b, worker_final(3, "run_c")])) == [1, 2, 3]


@pytest.mark.parametrize(
    "changes",
    [
        {"requester": "bob"},
        {"memory_context": "mem_2"},
        {"callback_result": None},
        {"environment": replace(ENV, model="m-other")},
        {"environment": replace(ENV, tools=())},
        {"environment": replace(ENV, approval_mode="never")},
        {"principals": replace(PRINCIPALS, answerer="agent_other")},
        {"custom_context": True},
    ],
    ids=["requester", "memory_context", "no_callback_result", "model", "tools", "approval",
         "answerer", "custom_context"],
)
def test_m8_worker_finals_across_runs_need_every_match(changes: dict[str, Any]) -> None:
    a, b = worker_final(1, "run_a"), worker_final(2, "run_b", **changes)
    assert not compatible(a, b)
    assert not compatible(b, a)


def test_m8_worker_final_without_callback_result_is_unknown_provenance() -> None:
    """Even within one run: unknown result provenance cannot qualify."""
    unknown = worker_final(1, "run_a", callback_result=None)
    assert not unknown.provenance_known
    assert not compatible(unknown, worker_final(2, "run_a"))
    assert not compatible(unknown, receipt(2, run_public_id=RunId("run_a")))


def test_m8_ordinary_receipts_never_cross_runs() -> None:
    final = worker_final(1, "run_a")
    ordinary = receipt(2, run_public_id=RunId("run_b"))
    assert not compatible(final, ordinary)
    # the same source run is enough for a worker final and an ordinary receipt
    assert compatible(final, receipt(2, run_public_id=RunId("run_a")))
    # and two worker finals of one run need nothing more
    assert compatible(final, worker_final(2, "run_a", requester="bob", memory_context="mem_9"))


def test_m8_every_pair_is_checked_not_only_the_head() -> None:
    """Compatibility is not transitive: an ordinary receipt of run_a, a worker final of run_a
    and a worker final of run_b. The third matches the second but not the first, so it does
    not join: an ordinary receipt never shares a reply with another run's receipt."""
    first = receipt(1, run_public_id=RunId("run_a"))
    second = worker_final(2, "run_a")
    third = worker_final(3, "run_b")
    assert compatible(first, second)
    assert compatible(second, third)
    assert not compatible(first, third)
    assert [positions(b) for b in batches([first, second, third])] == [[1, 2], [3]]
    # checked against the head alone, the ordinary receipt would join the two runs' finals
    assert [positions(b) for b in batches([second, third, replace(first, queue_position=4)])] \
        == [[2, 3], [4]]


# -- M8: how a batch becomes the reply ---------------------------------------------------------


def test_m8_earlier_receipts_are_turns_and_the_last_opens_the_reply() -> None:
    batch = next_batch([receipt(p) for p in range(1, 5)])
    plan = plan_reply(batch)
    assert positions(plan.individual) == [1, 2, 3]
    assert plan.opener.queue_position == 4
    assert plan.receipts == batch  # each receipt, with its own content size and stamps
    assert [r.task_key for r in plan.receipts] == ["task_1", "task_2", "task_3", "task_4"]
    assert plan.lock_order == (RUN,)


def test_m8_a_single_receipt_opens_the_reply_alone() -> None:
    plan = plan_reply((receipt(1),))
    assert plan.individual == ()
    assert plan.opener == receipt(1)
    assert plan.sources.task_key == "task_1"


def test_m8_head_alone_when_the_batch_cannot_commit() -> None:
    batch = next_batch([worker_final(1, "run_b"), worker_final(2, "run_a"), worker_final(3, "x")])
    plan = plan_reply(batch)
    assert plan.lock_order == (RunId("run_a"), RunId("run_b"), RunId("x"))  # stable order
    alone = plan.head_alone()
    assert alone.individual == ()
    assert alone.opener == batch[0]
    assert alone.receipts == (batch[0],)
    assert not alone.sources.combined


def test_m8_plan_refuses_what_never_shares_a_reply() -> None:
    with pytest.raises(ValueError, match="at least one"):
        plan_reply(())
    with pytest.raises(ValueError, match="not compatible"):
        plan_reply((receipt(1), receipt(2, custom_context=True)))
    with pytest.raises(ValueError, match="read order"):
        plan_reply((receipt(2), receipt(1)))


# -- M9: combined reports ----------------------------------------------------------------------


def test_m9_combined_report_lists_every_source_and_empties_singular_fields() -> None:
    batch = (worker_final(1, "run_a"), worker_final(2, "run_b"), worker_final(3, "run_a"))
    sources = combined_sources(batch)
    assert sources.combined
    assert (sources.sender_conversation_id, sources.run_public_id, sources.task_key) == (
        None, None, None
    )
    assert sources.callback_sources == (
        CallbackSource(ConversationId("conv_child_1"), RunId("run_a"), "task_1", "res_1"),
        CallbackSource(ConversationId("conv_child_2"), RunId("run_b"), "task_2", "res_2"),
        CallbackSource(ConversationId("conv_child_3"), RunId("run_a"), "task_3", "res_3"),
    )
    meta = sources.as_meta()
    assert meta["sender_conversation_public_id"] is None
    assert [s["callback_result"] for s in meta["callback_sources"]] == ["res_1", "res_2", "res_3"]
    assert plan_reply(batch).sources == sources


def test_m9_single_worker_reply_keeps_its_sender_fields() -> None:
    final = worker_final(1, "run_a")
    sources = combined_sources((final,))
    assert not sources.combined
    assert sources.sender_conversation_id == ConversationId("conv_child_1")
    assert sources.run_public_id == RunId("run_a")
    assert sources.task_key == "task_1"
    assert sources.callback_sources == (
        CallbackSource(ConversationId("conv_child_1"), RunId("run_a"), "task_1", "res_1"),
    )


def test_m9_ordinary_receipts_keep_their_source_run() -> None:
    sources = combined_sources((receipt(1), receipt(2)))
    assert not sources.combined
    assert sources.callback_sources == ()
    assert sources.sender_conversation_id == SENDER
    assert sources.run_public_id == RUN  # the Stop fence stays on the source run
    assert sources.task_key is None  # two tasks: the reply is not one task's
    with pytest.raises(ValueError, match="at least one"):
        combined_sources(())


# -- M8: properties ----------------------------------------------------------------------------


@st.composite
def arrivals(draw: st.DrawFn) -> list[Receipt]:
    """Receipts in read order. Each example picks how often a receipt differs from the common
    one in each dimension (never, rarely, often) and how many are worker finals, so that long
    compatible runs, cross-run worker finals and frequent breaks all occur."""
    odds = draw(st.sampled_from([0, 3, 10, 40]))  # percent, per dimension
    workers = draw(st.sampled_from([0, 50, 100]))  # percent of receipts that are worker finals
    largest = draw(st.sampled_from([400, 4_000, SNAPSHOT_LIMIT_BYTES // 3]))

    def pick(base: Any, *others: Any) -> Any:
        if draw(st.integers(min_value=0, max_value=99)) >= odds:
            return base
        return draw(st.sampled_from(others))

    gaps = draw(st.lists(st.integers(min_value=1, max_value=3), max_size=60))
    arrived: list[Receipt] = []
    for position in itertools.accumulate(gaps):
        final: WorkerFinal | None = None
        if draw(st.integers(min_value=0, max_value=99)) < workers:
            final = WorkerFinal(
                pick("ada", "bob"), pick("mem_1", "mem_2"), pick(f"res_{position}", None)
            )
        run = RunId(f"run_{position}") if final is not None and workers == 100 else RUN
        arrived.append(Receipt(
            input_id=InputId(f"in_{position}"),
            queue_position=position,
            origin=draw(st.sampled_from([Origin.TASK_RESULT, Origin.CHILD])),
            principals=pick(PRINCIPALS, replace(PRINCIPALS, answerer="agent_other")),
            environment=pick(ENV, replace(ENV, tools=()), replace(ENV, model="m-other")),
            sender_conversation_id=pick(SENDER, None),
            run_public_id=pick(run, RunId("run_2"), RunId("run_3"), None),
            task_key=pick(f"task_{position}", None),
            content_bytes=draw(st.integers(min_value=0, max_value=largest)),
            visible=pick(True, False),
            custom_context=pick(False, True),
            freshness_fence=pick(False, True),
            worker_final=final,
        ))
    return arrived


limits = st.integers(min_value=1, max_value=MAX_BATCH_RECEIPTS)
byte_limits = st.sampled_from([SNAPSHOT_LIMIT_BYTES, 0, 1_000, SNAPSHOT_LIMIT_BYTES // 2])


@given(arrivals(), limits, byte_limits)
def test_m8_batches_partition_the_arrivals_in_order(
    arrived: list[Receipt], limit: int, max_bytes: int
) -> None:
    taken = batches(arrived, limit=limit, max_bytes=max_bytes)
    assert [r for b in taken for r in b] == arrived  # nothing lost, repeated or reordered
    if arrived:
        assert next_batch(arrived, limit=limit, max_bytes=max_bytes) == taken[0]


@given(arrivals(), limits, byte_limits)
def test_m8_batches_are_bounded_in_count_and_bytes(
    arrived: list[Receipt], limit: int, max_bytes: int
) -> None:
    for batch in batches(arrived, limit=limit, max_bytes=max_bytes):
        assert 1 <= len(batch) <= limit
        assert len(batch) == 1 or sum(r.content_bytes for r in batch) <= max_bytes


@given(arrivals(), limits, byte_limits)
def test_m8_every_batch_is_pairwise_compatible(
    arrived: list[Receipt], limit: int, max_bytes: int
) -> None:
    for batch in batches(arrived, limit=limit, max_bytes=max_bytes):
        for a, b in itertools.combinations(batch, 2):
            assert compatible(a, b)
        plan_reply(batch)  # never refuses a batch next_batch took


@given(arrivals(), limits, byte_limits)
def test_m8_a_batch_never_stops_early(
    arrived: list[Receipt], limit: int, max_bytes: int
) -> None:
    """No delay, no gaps: a batch ends only at the count limit, the byte bound or a receipt
    incompatible with one already taken."""
    taken = batches(arrived, limit=limit, max_bytes=max_bytes)
    for batch, following in itertools.pairwise(taken):
        after = following[0]
        assert (
            len(batch) == limit
            or sum(r.content_bytes for r in batch) + after.content_bytes > max_bytes
            or not all(compatible(member, after) for member in batch)
        )


@given(arrivals())
def test_m8_compatible_is_symmetric_and_reflexive_on_plain_receipts(
    arrived: list[Receipt],
) -> None:
    for a, b in itertools.product(arrived[:12], repeat=2):
        assert compatible(a, b) == compatible(b, a)
    for a in arrived:
        assert compatible(a, a) == a.batchable
        if a.plain and a.provenance_known:
            assert compatible(a, a)


@given(arrivals())
def test_m9_combined_sources_follow_the_worker_finals(arrived: list[Receipt]) -> None:
    for batch in batches(arrived):
        sources = combined_sources(batch)
        finals = [r for r in batch if r.worker_final is not None and r.provenance_known]
        assert len(sources.callback_sources) == len(finals)
        if sources.combined:
            assert sources.sender_conversation_id is None
            assert sources.run_public_id is None
            assert sources.task_key is None
        elif len(batch) == 1:
            assert sources.run_public_id == batch[0].run_public_id
            assert sources.task_key == batch[0].task_key
