"""B8: what each SDK adapter reports -- tokens and cache tokens, streamed or not -- lands on the
run and the conversation, through a runtime on both backends and a provider on loopback.

A two-step turn (a tool call, then the answer) against each protocol: the run's usage is the sum
of both calls as the server reported them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from tests.conftest import RuntimeFactory
from tests.models.loopback import (
    LoopbackServer,
    Scripted,
    anthropic_end,
    anthropic_message,
    anthropic_start,
    anthropic_stream,
    anthropic_text,
    anthropic_text_block,
    anthropic_tool_block,
    anthropic_tool_use,
    openai_chunk,
    openai_completion,
    openai_stream,
    openai_tool_call,
    openai_tool_fragment,
)
from tidings import Profile, RunStatus, Tool, ToolContext, Usage
from tidings.models.anthropic import AnthropicModel
from tidings.models.openai import OpenAIChatModel

WAIT = 30.0  # bound on waiting for something the test arranged; never asserted on
TWO_CALLS = Usage(model_calls=2, input_tokens=250, output_tokens=13, cache_read_tokens=180,
                  cache_write_tokens=0)
"""(120 in, 100 of them cached, 9 out) then (130 in, 80 cached, 4 out)."""


async def note(ctx: ToolContext, args: Mapping[str, Any]) -> str:
    return "noted"


def openai_replies(stream: bool) -> list[Scripted]:
    if not stream:
        return [
            openai_completion(tool_calls=[openai_tool_call("c1", "note", "{}")],
                              finish_reason="tool_calls", prompt_tokens=120,
                              completion_tokens=9, cached_tokens=100),
            openai_completion(text="Noted.", prompt_tokens=130, completion_tokens=4,
                              cached_tokens=80),
        ]
    return [
        openai_stream([
            openai_chunk(tool_calls=[openai_tool_fragment(0, call_id="c1", name="note",
                                                          arguments="{}")]),
            openai_chunk(finish_reason="tool_calls"),
            openai_chunk(usage=(120, 9), cached_tokens=100),
        ]),
        openai_stream([
            openai_chunk(content="Noted.", role=True), openai_chunk(finish_reason="stop"),
            openai_chunk(usage=(130, 4), cached_tokens=80),
        ]),
    ]


def anthropic_replies(stream: bool) -> list[Scripted]:
    # Anthropic counts the uncached part apart: 20 + 100 read = 120; 50 + 80 read = 130.
    if not stream:
        return [
            anthropic_message([anthropic_tool_use("tu1", "note", {})], stop_reason="tool_use",
                              input_tokens=20, output_tokens=9, cache_read_input_tokens=100,
                              cache_creation_input_tokens=0),
            anthropic_message([anthropic_text("Noted.")], input_tokens=50, output_tokens=4,
                              cache_read_input_tokens=80, cache_creation_input_tokens=0),
        ]
    return [
        anthropic_stream([
            anthropic_start(input_tokens=20, cache_read_input_tokens=100,
                            cache_creation_input_tokens=0),
            *anthropic_tool_block(0, "tu1", "note", []),
            *anthropic_end("tool_use", output_tokens=9),
        ]),
        anthropic_stream([
            anthropic_start(input_tokens=50, cache_read_input_tokens=80,
                            cache_creation_input_tokens=0),
            *anthropic_text_block(0, ["Noted."]),
            *anthropic_end(output_tokens=4),
        ]),
    ]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_b8_adapter_usage_with_cache_tokens_lands_on_the_run(
    runtimes: RuntimeFactory, server: LoopbackServer, provider: str, stream: bool
) -> None:
    model: OpenAIChatModel | AnthropicModel
    if provider == "openai":
        server.push(*openai_replies(stream))
        model = OpenAIChatModel("served-model", base_url=f"{server.base_url}/v1", timeout=5.0,
                                stream=stream)
    else:
        server.push(*anthropic_replies(stream))
        model = AnthropicModel("served-model", base_url=server.base_url, timeout=5.0,
                               stream=stream)
    try:
        rt = await runtimes(models=[model], tools=[Tool("note", "Notes.", note)])
        conv = (await rt.create_conversation(
            "alice", Profile(model="served-model", tools=("note",))
        )).conversation_id
        await rt.post(conv, "note it")
        async with asyncio.timeout(WAIT):
            await rt.settle(conv)
    finally:
        await model.aclose()

    [run] = await rt.runs.list(conv)
    assert (run.status, run.steps, len(server.requests)) == (RunStatus.COMPLETED, 2, 2)
    assert run.usage == TWO_CALLS
    assert (await rt.conversation(conv)).usage == TWO_CALLS
    if provider == "openai" and stream:
        assert all(r.body["stream_options"] == {"include_usage": True} for r in server.requests)
