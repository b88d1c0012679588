"""The child process of the P5 crash tests: ``remote_child.py URL AGENT [--unrecorded]``.

It opens a runtime on the database at URL with one remote agent (AGENT: the keyword arguments
of its :class:`~tidings.RemoteAgent`, as JSON), has a turn spawn it with the brief ``slow
work``, and announces the checkpoint ``sent`` (the conversation, the instance, the request) once
the remote task's id is stored -- then blocks until it is SIGKILLed. With ``--unrecorded`` the
agent's answer to the brief is never stored: the checkpoint comes once the brief was sent, in
the window between the send and its record.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from tidings import Profile, RemoteAgent, Rule, Runtime, ScriptedModel
from tidings.agents.client import AgentClient

BLOCK_SECONDS = 120  # a safety net: a child whose parent vanished does not linger forever


def announce(**fields: str) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


async def main(url: str, agent: RemoteAgent, unrecorded: bool) -> None:
    sent = asyncio.Event()
    if unrecorded:
        send = AgentClient.send

        async def sent_then_hang(self: AgentClient, text: str, **ids: Any) -> Any:
            await send(self, text, **ids)
            sent.set()
            await asyncio.sleep(BLOCK_SECONDS)  # the answer is never stored

        AgentClient.send = sent_then_hang  # type: ignore[method-assign]
    model = ScriptedModel(rules=[
        Rule({"text_equals": "go"}, {"tool_calls": [{"name": "spawn", "arguments": {
            "agent": agent.name, "brief": "slow work"}}]}),
        Rule({"tool_result": "spawn"}, {"text": "Delegated."}),
    ])
    async with Runtime.open(url, models=[model], agents=[agent]) as rt:
        conv = (await rt.create_conversation("alice", Profile(
            model="scripted", tools=("spawn",)))).conversation_id
        await rt.post(conv, "go")
        await rt.settle(conv)
        [request] = await rt.children.list(conv)
        waiting = asyncio.ensure_future(sent.wait())
        while not waiting.done():
            row = await rt.store.read(lambda tx: tx.one("remote_child",
                                                        request_id=request.request_id))
            if row is not None and row["remote_task_id"] is not None:
                break
            await asyncio.wait({waiting}, timeout=0.02)
        announce(checkpoint="sent", conversation_id=conv, instance_id=rt.instance_id,
                 request_id=request.request_id)
        await asyncio.sleep(BLOCK_SECONDS)
        raise SystemExit("the parent never killed this child")


if __name__ == "__main__":
    url, declared = sys.argv[1:3]
    asyncio.run(main(url, RemoteAgent(**json.loads(declared)),
                     unrecorded=sys.argv[3:] == ["--unrecorded"]))
