"""M16/M13 across a SIGKILL: a child's reply committed but not yet relayed when its runtime
died is relayed by the next instance -- exactly once -- and answered in one parent turn; a
turn-owned report whose owning run died unconsumed comes back as mail, once."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import sys

from tests.conftest import Backend
from tests.scenarios.test_children import MODEL
from tests.scenarios.test_children_turn import MODEL as TURN_MODEL
from tests.waiting import eventually
from tidings.runtime.root import Runtime
from tidings.types import Origin, Run, StartKind

CHILD = """
import asyncio, json, sys
from tidings import Profile, Runtime
from tidings.runtime.root import RuntimeConfig
from tests.scenarios.test_children import MODEL

async def main() -> None:
    # No kick and no sweep: the reply waits for a relay.
    config = RuntimeConfig(relay_kick=False, relay_sweep=None)
    async with Runtime.open(sys.argv[1], models=[MODEL], config=config) as rt:
        parent = (await rt.create_conversation(
            "alice", Profile(model="scripted", tools=("spawn",)))).conversation_id
        await rt.post(parent, "please delegate counting")
        while True:
            requests = await rt.relay.requests_of(parent)
            # The parent's turn has ended too: the kill lands between the reply and its relay,
            # not inside a turn whose slot the next instance would wait out.
            runs = await rt.runs.list(parent)
            if requests and requests[0].state == "replied" and runs[0].ended_at_us:
                break
            await asyncio.sleep(0.02)
        print(json.dumps({"parent": parent}), flush=True)
        await asyncio.sleep(3600)

asyncio.run(main())
"""


async def _killed_after_reply(script: str, url: str) -> str:
    """Run ``script`` until it prints the parent whose child replied, then SIGKILL it."""
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, url, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        line = await asyncio.wait_for(child.stdout.readline(), 30)
        assert line, (await child.stderr.read()).decode() if child.stderr else "no output"
        parent: str = json.loads(line)["parent"]
    finally:
        with contextlib.suppress(ProcessLookupError):
            child.kill()
        await child.wait()
    return parent


async def _settled_runs(rt: Runtime, parent: str, *, relay: bool = False) -> list[Run]:
    """The parent's runs, once it settled (after a relay of what is pending, if ``relay``)."""
    if relay:
        await rt.relay.relay_pending()
    await rt.settle(parent)
    return await rt.runs.list(parent)


def _mail_run_ended(runs: list[Run]) -> bool:
    return len(runs) == 2 and runs[-1].ended_at_us is not None


async def test_m13_a_reply_committed_before_a_crash_is_relayed_once_after_restart(
    backend: Backend,
) -> None:
    # SIGKILL between the reply's commit and its relay.
    parent = await _killed_after_reply(CHILD, backend.url)

    for restart in range(2):  # a second restart relays nothing again
        async with Runtime.open(backend.url, models=[MODEL]) as rt:
            if restart == 0:
                await eventually(functools.partial(_settled_runs, rt, parent), _mail_run_ended,
                                 what="the relayed reply's mail run ended", within_s=20,
                                 poll_s=0.05)
            else:
                await rt.settle(parent)
            mails = [i for i in await rt.inputs.list(parent) if i.origin is Origin.CHILD]
            assert len(mails) == 1
            runs = await rt.runs.list(parent)
            assert [r.trigger for r in runs] == [StartKind.PERSON, StartKind.MAIL]
            (request,) = await rt.relay.requests_of(parent)
            assert request.relayed


OWNER_DIES = """
import asyncio, json, sys
from datetime import timedelta
from tidings import Profile, Runtime
from tidings.models.scripted import Rule, ScriptedModel
from tidings.runtime.root import RuntimeConfig
from tidings.turns.plan import TurnConfig

MODEL = ScriptedModel(rules=[
    Rule({"tool_result": "spawn"}, {"text": "Thinking.", "delay_seconds": 3600}),
    Rule({"text_contains": "delegate within"}, {"tool_calls": [{"name": "spawn", "arguments": {
        "brief": "count to three", "lifetime": "turn"}}]}),
    Rule({"text_contains": "count to three"}, {"text": "one two three"}),
], default={"text": "ok"})

async def main() -> None:
    config = RuntimeConfig(turns=TurnConfig(slot_ttl=timedelta(seconds=1)))
    async with Runtime.open(sys.argv[1], models=[MODEL], config=config) as rt:
        parent = (await rt.create_conversation(
            "alice", Profile(model="scripted", tools=("spawn",)))).conversation_id
        await rt.post(parent, "please delegate within this turn")
        while True:
            requests = await rt.relay.requests_of(parent)
            if requests and requests[0].state == "replied":
                break
            await asyncio.sleep(0.02)
        print(json.dumps({"parent": parent}), flush=True)
        await asyncio.sleep(3600)

asyncio.run(main())
"""


async def test_m16_a_turn_owned_report_whose_run_died_comes_back_as_mail_once(
    backend: Backend,
) -> None:
    """The owning run dies (SIGKILL) after its child replied and before it consumed the
    report: the next instance ends that run, and the report comes back as mail, once."""
    # The owning run dies while it waits on its model.
    parent = await _killed_after_reply(OWNER_DIES, backend.url)

    for restart in range(2):  # a second restart relays nothing again
        async with Runtime.open(backend.url, models=[TURN_MODEL]) as rt:
            if restart == 0:
                await eventually(functools.partial(_settled_runs, rt, parent, relay=True),
                                 _mail_run_ended, what="the report's mail run ended",
                                 within_s=30, poll_s=0.1)
            else:
                await rt.relay.relay_pending()
                await rt.settle(parent)
            (request,) = await rt.relay.requests_of(parent)
            assert request.relayed
            assert request.consumed_in_run is None  # its owner never read it
            mails = [i for i in await rt.inputs.list(parent) if i.origin is Origin.CHILD]
            assert len(mails) == 1
            first, mail_run = await rt.runs.list(parent)
            assert first.ended_at_us is not None  # the dead owner was ended
            assert mail_run.trigger is StartKind.MAIL
