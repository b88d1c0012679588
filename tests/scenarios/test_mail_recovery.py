"""M13 with real processes and real child conversations: a settled, undelivered result is
re-found by the sweep when its wake-up was lost or the recipient's queue was full -- and
delivered once, the delivery committed with the mark that says so. And M10's other branch:
mail the model refuses completes as a message of what was received."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from tests.conftest import RuntimeFactory
from tests.scenarios.test_retry import FAST, Switchable
from tests.scenarios.test_tasks import MODEL as TASK_MODEL
from tests.scenarios.test_tasks import notes, wait_for_runs
from tests.waiting import eventually
from tidings.errors import InvalidInputError
from tidings.mail.door import DoorConfig
from tidings.models.base import ModelErrorKind
from tidings.models.scripted import Rule, ScriptedModel
from tidings.records.transcript import ConversationTx
from tidings.runtime.root import Runtime, RuntimeConfig
from tidings.scheduler.coordinator import CoordinatorConfig
from tidings.types import Origin, Profile, RunStatus, StartKind

HELD = "held-by-test"
SWEEP_BY_TEST = RuntimeConfig(coordinator=CoordinatorConfig(sweep_interval=timedelta(hours=1)))
"""Only the test's own calls sweep: the periodic one cannot race them."""


async def hold(rt: Runtime, conversation: str) -> None:
    """Take the conversation's slot as a turn elsewhere would (a minute's lease)."""

    def take(cx: ConversationTx) -> None:
        cx.slot.take(HELD, cx.now_us + 60_000_000, rt.instance_id, "run_held")

    await rt.catalog.change(conversation, take)


async def release_silently(rt: Runtime, conversation: str) -> None:
    """Free the slot the way a dying holder would: nobody is asked for a turn."""

    def free(cx: ConversationTx) -> None:
        cx.slot.release(HELD)

    await rt.catalog.change(conversation, free)


async def test_m13_a_settled_task_whose_wake_was_lost_is_refound_by_the_sweep(
    runtimes: RuntimeFactory,
) -> None:
    rt = await runtimes(models=[TASK_MODEL], config=SWEEP_BY_TEST)
    conv = (await rt.create_conversation("alice", Profile(model="scripted", tools=("shell",)))
            ).conversation_id
    await rt.post(conv, "please build in the background")
    # The turn that started the task ends; the task still runs.
    await eventually(lambda: rt.runs.list(conv), lambda runs: runs and runs[0].ended_at_us,
                     what="the first turn ended")
    await hold(rt, conv)
    (task,) = await rt.tasks.list(conv)
    # The task ends while the slot is held: its end is journalled (and the wake-up it asked
    # for found the slot busy), nothing is delivered.
    assert await rt.background.wait_journalled([task.task_key], 20)
    assert (await rt.tasks.get(conv, task.task_key)).state.terminal
    await rt.settle(conv)
    assert notes(await rt.transcript(conv)) == []
    await release_silently(rt, conv)  # ...and the wake-up is lost with the holder
    # Nothing asks again by itself: the busy start retries only when the held lease (a
    # minute) runs out, and the periodic sweep is off -- the test's sweep is the first.
    assert len(await rt.runs.list(conv)) == 1

    assert await rt.coordinator.sweep() == 1  # level-triggered: the settled task is found
    await wait_for_runs(rt, conv, 2)
    assert len(notes(await rt.transcript(conv))) == 1  # delivered once
    assert [r.trigger for r in await rt.runs.list(conv)][1] is StartKind.WAKE
    assert await rt.coordinator.sweep() == 0  # consumed: nothing left to find


CHILD_MODEL = ScriptedModel(
    rules=[
        Rule({"text_contains": "<task_result"}, {"text": "The child reported back."}),
        Rule({"text_contains": "count to three"}, {"text": "one two three"}),
    ],
    default={"text": "ok"},
)


async def test_m13_a_reply_refused_by_a_full_queue_is_relayed_once_by_the_sweep(
    runtimes: RuntimeFactory,
) -> None:
    # The test runs the relay's sweep itself.
    config = RuntimeConfig(door=DoorConfig(queue_limit=2), relay_sweep=None)
    rt = await runtimes(models=[CHILD_MODEL], config=config)
    parent = (await rt.create_conversation("alice", Profile(model="scripted", tools=("spawn",)))
              ).conversation_id
    await rt.post(parent, "hello")
    await wait_for_runs(rt, parent, 1)
    (run,) = await rt.runs.list(parent)
    await hold(rt, parent)
    for words in ("first", "second"):  # the parent's queue is full behind the held slot
        await rt.post(parent, words)
    request = await rt.relay.spawn(parent, run.run_id, "call-1", "count to three")
    assert await rt.relay.await_replies([request.request_id], 20)
    await rt.relay.relay_pending()
    (still,) = await rt.relay.requests_of(parent)
    assert still.state == "replied"
    assert not still.relayed  # refused by the full queue, nothing marked
    assert [i for i in await rt.inputs.list(parent) if i.origin is Origin.CHILD] == []

    await release_silently(rt, parent)
    rt.coordinator.request(parent, None)
    await wait_for_runs(rt, parent, 2)  # the person's queued words are read
    assert await rt.relay.relay_pending() == 1  # the sweep's pass finds room now
    assert await rt.relay.relay_pending() == 0
    await wait_for_runs(rt, parent, 3)
    (mail,) = [i for i in await rt.inputs.list(parent) if i.origin is Origin.CHILD]
    assert mail.task_key == request.task_key
    assert (await rt.transcript(parent))[-1].content == "The child reported back."


async def test_m10_an_input_refusal_completes_the_mail_as_a_message_of_what_was_received(
    runtimes: RuntimeFactory,
) -> None:
    strict = Switchable("strict", down=ModelErrorKind.PERMANENT)
    strict.up = True
    rt = await runtimes(models=[strict], config=replace(FAST, relay_kick=False,
                                                        relay_sweep=None))
    parent = (await rt.create_conversation("alice", Profile(model="strict"))).conversation_id
    request = await rt.relay.spawn(parent, "run_host", "call-1", "count to three")
    await wait_for_runs(rt, request.child_conversation_id, 1)  # the child answers

    strict.up = False  # the model refuses the receipt itself
    assert await rt.relay.relay_pending() == 1
    await wait_for_runs(rt, parent, 1)
    (run,) = await rt.runs.list(parent)
    assert (run.trigger, run.status) == (StartKind.MAIL, RunStatus.COMPLETED)
    (mail,) = [i for i in await rt.inputs.list(parent) if i.origin is Origin.CHILD]
    reply = (await rt.transcript(parent))[-1]
    assert reply.role == "assistant"
    assert mail.content in reply.content  # the received text, kept
    assert reply.meta["refused"] == "model_permanent"
    with pytest.raises(InvalidInputError):  # no retryable model task
        await rt.runs.retry(parent, run.run_id, owner="alice")
