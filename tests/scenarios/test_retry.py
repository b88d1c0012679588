"""C8 and A2's retry: after a run needs attention, a person retries it, optionally naming
another of the profile's models; the retry is the person's input and runs once."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.conftest import RuntimeFactory
from tests.scenarios.test_tasks import wait_for_runs
from tidings.errors import InvalidInputError, UnknownConversationError
from tidings.models.base import (
    DeltaCallback,
    ModelError,
    ModelErrorKind,
    ModelReply,
    ModelRequest,
)
from tidings.runtime.root import RuntimeConfig
from tidings.turns.runner import TurnConfig
from tidings.types import Profile, RunStatus

FAST = RuntimeConfig(turns=TurnConfig(model_attempts=2, retry_base=timedelta(0)))


class Switchable:
    """A model that is down until switched on; it records every call."""

    def __init__(self, name: str, down: ModelErrorKind = ModelErrorKind.RETRYABLE) -> None:
        self.name = name
        self.up = False
        self.calls = 0
        self.down = down

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
    ) -> ModelReply:
        self.calls += 1
        if not self.up:
            raise ModelError(self.down, "overloaded", model=self.name)
        return ModelReply(text=f"answered by {self.name}")


async def test_c8_a_retry_naming_another_model_runs_it_first(runtimes: RuntimeFactory) -> None:
    primary, spare = Switchable("primary"), Switchable("spare")
    rt = await runtimes(models=[primary, spare], config=FAST)
    profile = Profile(model="primary", fallbacks=("spare",))
    conv = (await rt.create_conversation("alice", profile)).conversation_id
    await rt.post(conv, "summarise the report")
    await wait_for_runs(rt, conv, 1)
    (failed,) = await rt.runs.list(conv)
    assert failed.status is RunStatus.NEEDS_ATTENTION
    assert (primary.calls, spare.calls) == (2, 2)

    spare.up = True
    primary.calls = spare.calls = 0
    retry = await rt.runs.retry(conv, failed.run_id, model="spare", owner="alice")
    again = await rt.runs.retry(conv, failed.run_id, model="spare", owner="alice")
    assert again.input_id == retry.input_id  # a double click retries once
    await wait_for_runs(rt, conv, 2)
    runs = await rt.runs.list(conv)
    assert [r.status for r in runs] == [RunStatus.NEEDS_ATTENTION, RunStatus.COMPLETED]
    assert runs[1].model == "spare"
    assert (primary.calls, spare.calls) == (0, 1)  # the named model first
    assert (await rt.transcript(conv))[-1].content == "answered by spare"
    assert not (await rt.conversation(conv)).awaiting_person


async def test_c8_a_retry_is_refused_for_a_bad_model_a_good_run_or_a_stranger(
    runtimes: RuntimeFactory,
) -> None:
    primary = Switchable("primary")
    rt = await runtimes(models=[primary], config=FAST)
    conv = (await rt.create_conversation("alice", Profile(model="primary"))).conversation_id
    await rt.post(conv, "hello")
    await wait_for_runs(rt, conv, 1)
    (failed,) = await rt.runs.list(conv)
    with pytest.raises(InvalidInputError):
        await rt.runs.retry(conv, failed.run_id, model="gpt-unknown")
    with pytest.raises(UnknownConversationError):
        await rt.runs.retry(conv, failed.run_id, owner="bob")
    primary.up = True
    await rt.runs.retry(conv, failed.run_id)
    await wait_for_runs(rt, conv, 2)
    completed = (await rt.runs.list(conv))[1]
    assert completed.status is RunStatus.COMPLETED
    with pytest.raises(InvalidInputError):
        await rt.runs.retry(conv, completed.run_id)
    assert len(await rt.inputs.list(conv)) == 2  # the refusals wrote nothing
