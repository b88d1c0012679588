"""M16/M13 across a SIGKILL: a child's reply committed but not yet relayed when its runtime
died is relayed by the next instance -- exactly once -- and answered in one parent turn."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time

from tests.conftest import Backend
from tests.scenarios.test_children import MODEL
from tidings.runtime import Runtime
from tidings.types import Origin, StartKind

CHILD = """
import asyncio, json, sys
from tidings import Profile, Runtime
from tests.scenarios.test_children import MODEL

async def main() -> None:
    async with Runtime.open(sys.argv[1], models=[MODEL]) as rt:
        rt.runner.on_child_reply = None  # no kick: the reply waits for a relay
        rt.relay.relay_pending = lambda **kw: asyncio.sleep(0, 0)  # nor a sweep
        parent = (await rt.create_conversation(
            "alice", Profile(model="scripted", tools=("spawn",)))).conversation_id
        await rt.post(parent, "please delegate counting")
        while True:
            requests = await rt.relay.requests_of(parent)
            if requests and requests[0].state == "replied":
                break
            await asyncio.sleep(0.02)
        print(json.dumps({"parent": parent}), flush=True)
        await asyncio.sleep(3600)

asyncio.run(main())
"""


async def test_m13_a_reply_committed_before_a_crash_is_relayed_once_after_restart(
    backend: Backend,
) -> None:
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, backend.url, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        line = await asyncio.wait_for(child.stdout.readline(), 30)
        assert line, (await child.stderr.read()).decode() if child.stderr else "no output"
        parent = json.loads(line)["parent"]
    finally:
        with contextlib.suppress(ProcessLookupError):
            child.kill()  # SIGKILL between the reply's commit and its relay
        await child.wait()

    for restart in range(2):  # a second restart relays nothing again
        async with Runtime.open(backend.url, models=[MODEL]) as rt:
            deadline = time.monotonic() + 20
            while True:
                await rt.settle(parent)
                runs = await rt.runs(parent)
                if restart == 1 or (len(runs) == 2 and runs[-1].ended_at_us is not None):
                    break
                assert time.monotonic() < deadline, runs
                await asyncio.sleep(0.05)
            mails = [i for i in await rt.inputs(parent) if i.origin is Origin.CHILD]
            assert len(mails) == 1
            runs = await rt.runs(parent)
            assert [r.trigger for r in runs] == [StartKind.PERSON, StartKind.MAIL]
            (request,) = await rt.relay.requests_of(parent)
            assert request.relayed
