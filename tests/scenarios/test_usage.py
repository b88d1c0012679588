"""B8: what model calls spend is stored on the run, summed per conversation, and counted in the
metrics by model -- also for a run that failed or was stopped, since its tokens were spent.

Everything runs on both backends through a started runtime with the scripted model, whose
replies here set their usage explicitly so the sums are exact.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import RuntimeFactory
from tidings import Profile, Rule, RunStatus, ScriptedModel, Tool, ToolContext, Usage
from tidings.runtime.root import Runtime, RuntimeConfig
from tidings.turns.runner import TurnConfig

OWNER = "alice"
WAIT = 30.0  # bound on waiting for something the test arranged; never asserted on
FAST = RuntimeConfig(turns=TurnConfig(model_attempts=3, retry_base=timedelta(0)))

LOOK = Rule({"text_equals": "look"}, {
    "tool_calls": [{"name": "note", "arguments": {"what": "the weather"}}],
    "usage": {"input_tokens": 100, "output_tokens": 10, "cache_read_tokens": 60,
              "cache_write_tokens": 20},
})
SEEN = Rule({"tool_result": "note"}, {
    "text": "It is sunny.",
    "usage": {"input_tokens": 130, "output_tokens": 5, "cache_read_tokens": 100},
})
TWO_STEPS = Usage(model_calls=2, input_tokens=230, output_tokens=15, cache_read_tokens=160,
                  cache_write_tokens=20)


async def note(ctx: ToolContext, args: Mapping[str, Any]) -> str:
    return f"noted {args.get('what')}"


NOTE = Tool("note", "Notes something.", note)


async def conversation(rt: Runtime, *tools: str, model: str = "scripted",
                       fallbacks: tuple[str, ...] = ()) -> str:
    created = await rt.create_conversation(
        OWNER, Profile(model=model, fallbacks=fallbacks, tools=tools)
    )
    return created.conversation_id


async def turn(rt: Runtime, conv: str, text: str) -> None:
    await rt.post(conv, text)
    async with asyncio.timeout(WAIT):
        await rt.settle(conv)


async def test_b8_two_step_turn_stores_summed_usage_and_the_conversation_sums_its_runs(
    runtimes: RuntimeFactory,
) -> None:
    rt = await runtimes(models=[ScriptedModel(rules=[LOOK, SEEN])], tools=[NOTE], config=FAST)
    conv = await conversation(rt, "note")
    fresh = await rt.conversation(conv)
    assert fresh.usage == Usage()  # no run yet: nothing spent

    await turn(rt, conv, "look")
    await turn(rt, conv, "hello")  # the default echo: the scripted model's own estimate
    first, second = await rt.runs.list(conv)
    assert (first.status, first.steps) == (RunStatus.COMPLETED, 2)
    assert first.usage == TWO_STEPS
    assert (await rt.runs.get(first.run_id)).usage == TWO_STEPS
    assert second.usage.model_calls == 1
    assert second.usage.input_tokens > 0
    assert second.usage.output_tokens == 2  # "hello": 5 characters
    assert (second.usage.cache_read_tokens, second.usage.cache_write_tokens) == (0, 0)

    assert (await rt.conversation(conv)).usage == first.usage + second.usage
    # Another conversation's runs are not in this one's sum.
    other = await conversation(rt, "note")
    await turn(rt, other, "look")
    assert (await rt.conversation(conv)).usage == first.usage + second.usage
    assert (await rt.conversation(other)).usage == TWO_STEPS


async def test_b8_a_failed_run_keeps_the_tokens_its_calls_spent(runtimes: RuntimeFactory) -> None:
    refuse = Rule({"tool_result": "note"}, {
        "error": "permanent", "usage": {"input_tokens": 70, "output_tokens": 1}})
    retry = Rule({"text_equals": "busy"}, {"error": "retryable", "usage": {"input_tokens": 10}})
    rt = await runtimes(models=[ScriptedModel(rules=[LOOK, refuse, retry])], tools=[NOTE],
                        config=FAST)
    conv = await conversation(rt, "note")
    await turn(rt, conv, "look")
    [failed] = await rt.runs.list(conv)
    assert (failed.status, failed.failure_code) == (RunStatus.FAILED, "model_permanent")
    # The tool step's call, and the refused call with what its provider reported.
    assert failed.usage == Usage(model_calls=2, input_tokens=170, output_tokens=11,
                                 cache_read_tokens=60, cache_write_tokens=20)

    busy = await conversation(rt)
    await turn(rt, busy, "busy")
    [exhausted] = await rt.runs.list(busy)
    assert exhausted.status is RunStatus.NEEDS_ATTENTION
    assert exhausted.usage == Usage(model_calls=3, input_tokens=30)  # every attempt counts
    assert (await rt.conversation(busy)).usage == exhausted.usage


async def test_b8_a_stopped_run_keeps_the_tokens_its_calls_spent(runtimes: RuntimeFactory) -> None:
    entered, release = asyncio.Event(), asyncio.Event()

    async def hold(ctx: ToolContext, args: Mapping[str, Any]) -> str:
        entered.set()
        await release.wait()
        return "released"

    block = Rule({"text_equals": "block"}, {
        "tool_calls": [{"name": "hold", "arguments": {}}],
        "usage": {"input_tokens": 40, "output_tokens": 4}})
    rt = await runtimes(models=[ScriptedModel(rules=[block])],
                        tools=[Tool("hold", "Holds.", hold)], config=FAST)
    conv = await conversation(rt, "hold")
    await rt.post(conv, "block")
    async with asyncio.timeout(WAIT):
        await entered.wait()
    (stopped,) = await rt.stop(conv)
    async with asyncio.timeout(WAIT):
        await rt.settle(conv)
    run = await rt.runs.get(stopped)
    assert run.status is RunStatus.STOPPED
    assert run.usage == Usage(model_calls=1, input_tokens=40, output_tokens=4)
    assert (await rt.conversation(conv)).usage == run.usage


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The samples of one metric family, by their sorted labels."""
    found: dict[tuple[tuple[str, str], ...], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                found[tuple(sorted(sample.labels.items()))] = sample.value
    return found


async def test_b8_metrics_count_model_calls_and_tokens_by_model_and_kind(
    runtimes: RuntimeFactory,
) -> None:
    hello = {"text": "hello", "usage": {"input_tokens": 7, "output_tokens": 1}}
    down = ScriptedModel(name="down", default={"error": "unavailable"})
    rt = await runtimes(models=[ScriptedModel(rules=[LOOK, SEEN], default=hello), down],
                        tools=[NOTE], config=FAST)
    await turn(rt, await conversation(rt, "note"), "look")
    fallback = await conversation(rt, model="down", fallbacks=("scripted",))
    await turn(rt, fallback, "hi")
    [run] = await rt.runs.list(fallback)
    assert run.status is RunStatus.COMPLETED
    assert run.usage == Usage(model_calls=2, input_tokens=7, output_tokens=1)  # both calls

    text = rt.metrics.render()
    assert samples(text, "tidings_model_calls_total") == {
        (("model", "down"),): 1.0, (("model", "scripted"),): 3.0,
    }
    tokens = samples(text, "tidings_model_tokens_total")
    assert {kind: tokens[(("kind", kind), ("model", "scripted"))]
            for kind in ("input", "output", "cache_read", "cache_write")} == {
        "input": 237.0, "output": 16.0, "cache_read": 160.0, "cache_write": 20.0,
    }
    assert tokens[(("kind", "input"), ("model", "down"))] == 0.0  # it spent nothing
