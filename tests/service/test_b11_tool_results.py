"""B11: ``tidings transcript`` shows a tool's result by its first lines and says how to see the
whole; ``--full`` shows it whole -- over the database, on both backends."""

from __future__ import annotations

import asyncio

from tests.conftest import Backend
from tests.service.test_cli import tidings
from tidings.models.scripted import Rule, ScriptedModel
from tidings.runtime.root import Runtime
from tidings.types import Profile

COUNTING = ScriptedModel(rules=[
    Rule({"text_contains": "count"},
         {"tool_calls": [{"name": "shell", "arguments": {"command": "seq 1 12"}}]}),
    Rule({"tool_result": "shell"}, {"text": "Counted."}),
])


async def _count(url: str) -> str:
    async with Runtime.open(url, models=[COUNTING]) as rt:
        made = await rt.create_conversation("alice", Profile(model="scripted", tools=("shell",)))
        answer = await rt.post(made.conversation_id, "count to twelve", wait=True)
        assert answer.reply == "Counted."
        return made.conversation_id


def test_b11_transcript_shows_a_tool_result_s_first_lines_and_full_shows_it_whole(
    backend: Backend,
) -> None:
    conversation = asyncio.run(_count(backend.url))
    shown = tidings("transcript", "--database", backend.url, conversation)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[2:] == [
        "  ← shell: exit 0", *(f"    {i}" for i in range(1, 8)),
        "    … (5 more lines; tidings transcript --full shows it whole)",
        "agent> Counted.",
    ]
    whole = tidings("transcript", "--database", backend.url, "--full", conversation)
    assert whole.returncode == 0, whole.stderr
    assert whole.stdout.splitlines()[2:] == [
        "  ← shell: exit 0", *(f"    {i}" for i in range(1, 13)), "agent> Counted."]
