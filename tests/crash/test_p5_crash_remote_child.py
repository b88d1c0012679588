"""P5 across a SIGKILL: a remote child's task outlives the tidings process that sent its brief.

The remote agent (tests/a2a_agents/remote.py, the ``a2a-sdk``'s server classes) runs apart
from tidings on loopback, so its task works on while the process that spawned it is killed --
after the remote task's id was stored, or in the window between sending the brief and storing
the answer. A runtime started afterwards on the same database follows that very task (adopted
from the gone instance; in the window, found again by its context), relays its answer once as
child mail read by one turn, and the agent received the brief once.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.a2a_agents import TOKEN, TOKEN_ENV, received, remote_agent
from tests.conftest import Backend
from tests.crash.helpers import spawn_script, wait_instance_released
from tests.waiting import eventually
from tidings import Rule, Runtime, ScriptedModel
from tidings.types import Message, RunStatus, StartKind

CHILD = Path(__file__).with_name("remote_child.py")
WAIT = 15.0


@pytest.mark.parametrize("window", ["recorded", "unrecorded"])
async def test_p5_a_sigkill_while_the_remote_works_relays_once_and_sends_once(
    backend: Backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, window: str,
) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    with remote_agent(tmp_path) as agent:
        declared = json.dumps({"name": agent.name, "url": agent.url, "token_env": TOKEN_ENV})
        flags = ["--unrecorded"] if window == "unrecorded" else []
        async with spawn_script(CHILD, backend.url, declared, *flags) as child:
            left = await child.checkpoint("sent", within_s=WAIT)
            await child.kill()  # SIGKILL while the remote task works: no shutdown code runs
        await wait_instance_released(backend.url, left["instance_id"])
        conv = left["conversation_id"]
        model = ScriptedModel(rules=[Rule({"text_contains": "done slowly"}, {"text": "Read."})],
                              default={"text": "ok"})
        async with Runtime.open(backend.url, models=[model], agents=[agent]) as rt:
            async def followed() -> tuple[str, ...]:
                return rt.remote_children.following()
            await eventually(followed, lambda f: f == (left["request_id"],),
                             what="the remote task followed again", within_s=WAIT)
            (tmp_path / "release").touch()

            async def transcript() -> list[Message]:
                await rt.settle(conv)
                return await rt.transcript(conv)
            messages = await eventually(transcript, lambda ms: ms[-1].content == "Read.",
                                        what="the parent's turn on the answer", within_s=WAIT)
            await asyncio.sleep(0.3)  # a second relay, were there one, would show by now
            messages = await rt.transcript(conv)
            [request] = await rt.children.list(conv)
            runs = await rt.runs.list(conv)
    assert received(tmp_path) == ["slow work"]  # the brief was sent once
    mails = [m for m in messages if "<task_result" in m.content]
    assert [m.content.count("<task_result") for m in mails] == [1]
    assert "done slowly: slow work" in mails[0].content
    assert (request.reply_status, request.relayed) == ("completed", True)
    assert [(r.trigger, r.status) for r in runs] == [
        (StartKind.PERSON, RunStatus.COMPLETED), (StartKind.MAIL, RunStatus.COMPLETED)]
