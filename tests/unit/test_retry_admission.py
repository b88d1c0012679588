"""C8, M10: which retries of a run are admitted, on which model, and what the retry carries.
Pure, no database."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tidings.errors import InvalidInputError, UnknownRunError
from tidings.turns.retry import admit_retry, receipt_environment
from tidings.types import (
    Author,
    AuthorKind,
    ConversationId,
    DeliveryMode,
    Input,
    InputId,
    InputState,
    Origin,
    Profile,
    Run,
    RunId,
    RunStatus,
    StartKind,
)

CONVERSATION = ConversationId("conv_1")
PROFILE = Profile(model="m-large", fallbacks=("m-small", "m-tiny"))
FAILED = Run(
    run_id=RunId("run_1"), conversation_id=CONVERSATION, trigger=StartKind.PERSON,
    status=RunStatus.FAILED, model="m-large", failure_code="model_permanent", steps=1,
    created_at_us=1, started_at_us=1, ended_at_us=2,
)
ENVIRONMENT: dict[str, Any] = {"model": "m-small", "fallbacks": ["m-tiny"], "tools": [],
                               "approval_mode": "never"}


def receipt(run_id: str | None, *, origin: Origin = Origin.CHILD, **meta: Any) -> Input:
    return Input(
        input_id=InputId("in_1"), conversation_id=CONVERSATION, queue_position=1, origin=origin,
        authored_by=Author(AuthorKind.AGENT, "kernel", "kernel"), sender_conversation_id=None,
        run_public_id=None, task_key=None, delivery_mode=DeliveryMode.QUEUE, content="report",
        meta=meta, state=InputState.MATERIALIZED,
        run_id=RunId(run_id) if run_id is not None else None, accepted_at_us=1,
    )


def test_c8_a_failed_run_is_retried_first_on_the_model_the_person_names() -> None:
    retry = admit_retry(FAILED, PROFILE, conversation_id=CONVERSATION, model="m-small",
                        environment=None)
    assert retry.kernel_meta == {"retry": {"run_public_id": "run_1", "model": "m-small"}}
    assert retry.text == "Please retry the request that failed, with m-small."
    # The same run and model twice is one admission (the door's idempotency key).
    again = admit_retry(FAILED, PROFILE, conversation_id=CONVERSATION, model="m-small",
                        environment=None)
    assert again.idempotency_key == retry.idempotency_key == "retry-run_1-m-small"
    other = admit_retry(FAILED, PROFILE, conversation_id=CONVERSATION, model=None,
                        environment=None)
    assert other.idempotency_key == "retry-run_1-default"


@pytest.mark.parametrize("status", [RunStatus.COMPLETED, RunStatus.RUNNING, RunStatus.STOPPED])
def test_c8_only_a_failed_run_or_one_that_needs_attention_is_retried(status: RunStatus) -> None:
    with pytest.raises(InvalidInputError, match="only a failed run"):
        admit_retry(replace(FAILED, status=status), PROFILE, conversation_id=CONVERSATION,
                    model=None, environment=None)
    admit_retry(replace(FAILED, status=RunStatus.NEEDS_ATTENTION), PROFILE,
                conversation_id=CONVERSATION, model=None, environment=None)


def test_c8_a_model_the_profile_does_not_name_and_another_conversations_run_are_refused(
) -> None:
    with pytest.raises(InvalidInputError, match="not one this run may use"):
        admit_retry(FAILED, PROFILE, conversation_id=CONVERSATION, model="m-other",
                    environment=None)
    with pytest.raises(UnknownRunError):
        admit_retry(FAILED, PROFILE, conversation_id=ConversationId("conv_2"), model=None,
                    environment=None)


def test_m10_a_mail_run_is_retried_within_its_frozen_environment_on_an_unspent_model() -> None:
    # The receipt froze m-small, m-tiny: the profile's m-large is not one it may use.
    with pytest.raises(InvalidInputError, match="not one this run may use"):
        admit_retry(FAILED, PROFILE, conversation_id=CONVERSATION, model="m-large",
                    environment=ENVIRONMENT, spent=["m-small"])
    with pytest.raises(InvalidInputError, match="was spent"):
        admit_retry(FAILED, PROFILE, conversation_id=CONVERSATION, model="m-small",
                    environment=ENVIRONMENT, spent=["m-small"])
    with pytest.raises(InvalidInputError, match="every model"):
        admit_retry(FAILED, PROFILE, conversation_id=CONVERSATION, model=None,
                    environment=ENVIRONMENT, spent=["m-small", "m-tiny"])
    retry = admit_retry(FAILED, PROFILE, conversation_id=CONVERSATION, model="m-tiny",
                        environment=ENVIRONMENT, spent=["m-small"])
    assert retry.kernel_meta["retry"] == {
        "run_public_id": "run_1", "model": "m-tiny", "environment": ENVIRONMENT,
        "spent": ["m-small"],
    }


def test_m10_the_environment_is_the_one_frozen_in_a_kernel_receipt_the_run_read() -> None:
    inputs = [
        receipt("run_0", environment={"model": "elsewhere"}),
        receipt("run_1", origin=Origin.PERSON, environment={"model": "forged"}),
        receipt("run_1", environment=ENVIRONMENT),
    ]
    assert receipt_environment(inputs, "run_1") == ENVIRONMENT
    assert receipt_environment(inputs[:2], "run_1") is None
    assert receipt_environment([receipt("run_1", environment="not a dict")], "run_1") is None
