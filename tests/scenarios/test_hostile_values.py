"""H4 through the Python API, on both backends: the values a caller passes to the runtime's
readers and writers -- positions beyond 64 bits, negative ones, NUL and control characters in
ids and cursors -- are refused as :class:`InvalidInputError` (never a store error, never a
driver's crash), the same on SQLite and PostgreSQL, and change nothing. An id that is only
looked up is an unknown id or invalid input, never a store error."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.conftest import RuntimeFactory
from tidings import InvalidInputError, Profile, Rule, ScriptedModel, StoreError, TidingsError
from tidings.records.results import MasterKey
from tidings.runtime.root import Runtime
from tidings.types import RunStatus

OWNER = "alice"
Call = Callable[[Runtime, str, str], Awaitable[Any]]

CALLS: dict[str, Call] = {
    "events after 2**63": lambda rt, c, r: rt.events(c, after_seq=2**63),
    "events after 2**64": lambda rt, c, r: rt.events(c, after_seq=2**64),
    "events after -1": lambda rt, c, r: rt.events(c, after_seq=-1),
    "events after True": lambda rt, c, r: rt.events(c, after_seq=True),
    "transcript after 10**40": lambda rt, c, r: rt.transcript(c, after_seq=10**40),
    "transcript after -(2**63)-1": lambda rt, c, r: rt.transcript(c, after_seq=-(2**63) - 1),
    "tasks before 2**70": lambda rt, c, r: rt.tasks.list(c, before_us=2**70),
    "tasks before -1": lambda rt, c, r: rt.tasks.list(c, before_us=-1),
    "conversations after NUL": lambda rt, c, r: rt.conversations.list(OWNER, after="a\x00"),
    "conversations after a line break": lambda rt, c, r: rt.conversations.list(
        OWNER, after="a\nb"),
    "results after NUL": lambda rt, c, r: rt.results.list(c, after="\x00"),
    "task key with NUL": lambda rt, c, r: rt.tasks.get(c, "bg-\x00"),
    "dead letters limit 2**70": lambda rt, c, r: rt.signals.dead_letters(limit=2**70),
    "dead letters limit -1": lambda rt, c, r: rt.signals.dead_letters(limit=-1),
    "inputs of a NUL id": lambda rt, c, r: rt.inputs.list("conv\x00"),
    "approvals with a NUL status": lambda rt, c, r: rt.approvals.list(c, status="\x00"),
    "retry a NUL run": lambda rt, c, r: rt.runs.retry(c, "run\x00"),
    "post with a NUL idempotency key": lambda rt, c, r: rt.post(
        c, "hi", idempotency_key="k\x00"),
}

# Ids only looked up: SQLite holds NUL, so there they are unknown ids; PostgreSQL cannot, so
# there they are invalid input. Either way a typed refusal, never a store error. (Over HTTP
# the path's bounds refuse them first: 422 on both.)
LOOKUPS: dict[str, Call] = {
    "stop a NUL run": lambda rt, c, r: rt.runs.stop(c, "run\x00"),
    "cancel a NUL child": lambda rt, c, r: rt.children.cancel(c, "child-\x00"),
    "decide a NUL approval": lambda rt, c, r: rt.approvals.decide(c, "apr\x00", approve=True,
                                                                  decided_by=OWNER),
}


async def _conversation(runtimes: RuntimeFactory) -> tuple[Runtime, str, str]:
    rt = await runtimes(models=[ScriptedModel(default={"echo": True})],
                        master_key=MasterKey.generate())
    conv = (await rt.create_conversation(OWNER, Profile(model="scripted"))).conversation_id
    await rt.post(conv, "hello")
    await rt.settle(conv)
    [run] = await rt.runs.list(conv)
    return rt, conv, run.run_id


async def _seen(rt: Runtime, conv: str) -> tuple[Any, ...]:
    return await rt.events(conv), await rt.inputs.list(conv), await rt.transcript(conv)


@pytest.mark.parametrize("name", sorted(CALLS))
async def test_h4_the_python_api_refuses_values_no_backend_holds_as_invalid_input(
    runtimes: RuntimeFactory, name: str
) -> None:
    rt, conv, run_id = await _conversation(runtimes)
    before = await _seen(rt, conv)
    with pytest.raises(InvalidInputError) as caught:
        await CALLS[name](rt, conv, run_id)
    assert not isinstance(caught.value, StoreError)
    assert await _seen(rt, conv) == before
    # The largest position both backends hold is an ordinary one: nothing after it.
    assert await rt.events(conv, after_seq=2**63 - 1) == []


@pytest.mark.parametrize("name", sorted(LOOKUPS))
async def test_h4_the_python_api_looks_up_a_nul_id_without_a_store_error(
    runtimes: RuntimeFactory, name: str
) -> None:
    rt, conv, run_id = await _conversation(runtimes)
    before = await _seen(rt, conv)
    with pytest.raises(TidingsError) as caught:
        await LOOKUPS[name](rt, conv, run_id)
    assert not isinstance(caught.value, StoreError)
    assert caught.value.code.startswith("unknown_") or caught.value.code == "invalid_input"
    assert await _seen(rt, conv) == before


async def test_h4_a_tool_output_with_nul_commits_its_turn_on_both_backends(
    runtimes: RuntimeFactory,
) -> None:
    """A foreground process printing NUL: the turn completes, its tool result keeps the text
    around the NUL (shown as U+FFFD), the same on both backends -- never a run stuck running."""
    model = ScriptedModel([
        Rule({"text_contains": "print"}, {"tool_calls": [
            {"name": "shell", "arguments": {"command": "printf 'a\\000b'"}}]}),
        Rule({"tool_result": "shell"}, {"text": "Printed."}),
    ])
    rt = await runtimes(models=[model])
    conv = (await rt.create_conversation(OWNER, Profile(model="scripted", tools=("shell",)))
            ).conversation_id
    await rt.post(conv, "print it", owner=OWNER)
    await rt.settle(conv)
    [run] = await rt.runs.list(conv)
    assert run.status is RunStatus.COMPLETED
    messages = await rt.transcript(conv)
    [result] = [m for m in messages if m.role == "tool"]
    assert "a\ufffdb" in result.content
    assert messages[-1].content == "Printed."
