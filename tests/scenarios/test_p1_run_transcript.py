"""P1 through the runtime: an A2A task's history is the messages of the run that read its
input -- ``Runtime.run_transcript`` -- however many other runs the conversation holds, and only
for the conversation's owner."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from tests.conftest import RuntimeFactory
from tidings.errors import InvalidInputError, UnknownConversationError
from tidings.models.scripted import Rule, ScriptedModel
from tidings.tools.registry import Tool, ToolContext, ToolOutput
from tidings.types import Profile

WAIT_S = 20.0  # a bound on waiting for what the test arranged; never asserted on

SCRIPT = ScriptedModel(
    rules=[
        Rule({"text_contains": "look"}, {"tool_calls": [{"name": "look", "arguments": {}}]}),
        Rule({"tool_result": "look"}, {"text": "Seen."}),
    ],
    default={"echo": True},
)
PROFILE = Profile(model="scripted", tools=("look",))


def look() -> Tool:
    async def run(context: ToolContext, arguments: Mapping[str, Any]) -> ToolOutput:
        return ToolOutput("a tree")

    return Tool("look", "Look around.", run)


async def test_p1_a_runs_transcript_is_its_own_messages_among_many_runs(
    runtimes: RuntimeFactory,
) -> None:
    rt = await runtimes(models=[SCRIPT], tools=[look()])
    conv = (await rt.create_conversation("alice", PROFILE)).conversation_id
    for n in range(5):
        await rt.post(conv, f"before {n}", wait=True, timeout=WAIT_S)
    looked = await rt.post(conv, "look around", wait=True, timeout=WAIT_S)
    for n in range(5):
        await rt.post(conv, f"after {n}", wait=True, timeout=WAIT_S)
    assert looked.run is not None

    said = await rt.runs.transcript(conv, looked.run.run_id, owner="alice")

    assert [(m.role, m.content) for m in said] == [
        ("user", "look around"), ("assistant", ""), ("tool", "a tree"), ("assistant", "Seen.")]
    assert [m.seq for m in said] == sorted(m.seq for m in said)
    assert all(m.run_id == looked.run.run_id for m in said)


async def test_p1_a_runs_transcript_is_refused_to_another_principal_as_unknown(
    runtimes: RuntimeFactory,
) -> None:
    rt = await runtimes(models=[SCRIPT], tools=[look()])
    conv = (await rt.create_conversation("alice", PROFILE)).conversation_id
    answer = await rt.post(conv, "hello", wait=True, timeout=WAIT_S)
    assert answer.run is not None

    with pytest.raises(UnknownConversationError):
        await rt.runs.transcript(conv, answer.run.run_id, owner="mallory")
    with pytest.raises(InvalidInputError):
        await rt.runs.transcript(conv, "not an id\x00", owner="alice")
    assert await rt.runs.transcript(conv, "run_unknown", owner="alice") == []
