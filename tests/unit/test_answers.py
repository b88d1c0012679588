"""B2's policy, without a database: when a wait for an input's answer is over, and what bounds
a wait may have."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from tidings.errors import InvalidInputError
from tidings.runtime.answers import answered, timeout_seconds
from tidings.types import (
    Answer,
    Author,
    AuthorKind,
    ConversationId,
    DeliveryMode,
    Input,
    InputId,
    InputState,
    Origin,
    Run,
    RunId,
    RunStatus,
    StartKind,
)

ITEM = Input(
    input_id=InputId("in_1"), conversation_id=ConversationId("conv_1"), queue_position=1,
    origin=Origin.PERSON, authored_by=Author(AuthorKind.HUMAN, "alice", "alice"),
    sender_conversation_id=None, run_public_id=None, task_key=None,
    delivery_mode=DeliveryMode.QUEUE, content="hello", meta={}, state=InputState.QUEUED,
    run_id=None, accepted_at_us=1,
)
RUN = Run(run_id=RunId("run_1"), conversation_id=ConversationId("conv_1"),
          trigger=StartKind.PERSON, status=RunStatus.RUNNING, model=None, failure_code=None,
          steps=0, created_at_us=1, started_at_us=1, ended_at_us=None)
READ = replace(ITEM, state=InputState.MATERIALIZED, run_id=RUN.run_id)


def answer(item: Input, status: RunStatus | None) -> Answer:
    run = None if status is None else replace(RUN, status=status)
    return Answer(item, run, None, timed_out=False)


@pytest.mark.parametrize("status", [s for s in RunStatus if s.ended])
def test_b2_the_run_that_read_the_input_ending_ends_the_wait(status: RunStatus) -> None:
    assert answered(answer(READ, status))
    assert answer(READ, status).status is status


def test_b2_a_run_awaiting_approval_ends_the_wait() -> None:
    assert answered(answer(READ, RunStatus.AWAITING_APPROVAL))


def test_b2_a_running_or_absent_run_does_not_end_the_wait() -> None:
    assert not answered(answer(READ, RunStatus.RUNNING))
    assert not answered(answer(ITEM, None))  # queued: no run has it
    assert answer(ITEM, None).status is InputState.QUEUED
    # In flight: the running turn took it; it has not written it yet.
    assert not answered(answer(ITEM, RunStatus.RUNNING))


def test_b2_a_cancelled_input_ends_the_wait_without_a_run() -> None:
    cancelled = answer(replace(ITEM, state=InputState.CANCELLED), None)
    assert answered(cancelled)
    assert cancelled.status is InputState.CANCELLED


def test_b2_a_wait_is_bounded_in_seconds_or_by_a_timedelta() -> None:
    assert timeout_seconds(2) == 2.0
    assert timeout_seconds(0) == 0.0
    assert timeout_seconds(timedelta(milliseconds=1500)) == 1.5
    for bad in (-1, float("nan"), timedelta(seconds=-1)):
        with pytest.raises(InvalidInputError):
            timeout_seconds(bad)
