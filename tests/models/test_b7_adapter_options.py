"""The SDK adapters' options, on the wire to a loopback provider: the output-token limit of the
constructor replaces the request's, a temperature is sent only when given; both adapters are
importable from ``tidings`` itself."""

from __future__ import annotations

import tidings
from tests.models.loopback import LoopbackServer, anthropic_message, openai_completion
from tidings.models.base import ModelRequest, PromptMessage

REQUEST = ModelRequest(model="m", system="Be brief.", tools=(),
                       messages=(PromptMessage(role="user", content="hi"),))


async def test_b7_openai_adapter_sends_its_token_limit_and_temperature(
    server: LoopbackServer,
) -> None:
    server.push(openai_completion(text="a"), openai_completion(text="b"))
    tuned = tidings.OpenAIChatModel("m", base_url=f"{server.base_url}/v1", api_key="k",
                                    stream=False, max_output_tokens=300, temperature=0.2)
    plain = tidings.OpenAIChatModel("m", base_url=f"{server.base_url}/v1", api_key="k",
                                    stream=False)
    try:
        await tuned.complete(REQUEST)
        await plain.complete(REQUEST)
    finally:
        await tuned.aclose()
        await plain.aclose()
    first, second = (r.body for r in server.requests)
    assert (first["max_tokens"], first["temperature"]) == (300, 0.2)
    assert second["max_tokens"] == REQUEST.max_output_tokens
    assert "temperature" not in second


async def test_b7_anthropic_adapter_sends_its_token_limit_and_temperature(
    server: LoopbackServer,
) -> None:
    reply = anthropic_message([{"type": "text", "text": "a"}])
    server.push(reply, reply)
    tuned = tidings.AnthropicModel("m", base_url=server.base_url, api_key="k", stream=False,
                                   max_output_tokens=300, temperature=0.7)
    plain = tidings.AnthropicModel("m", base_url=server.base_url, api_key="k", stream=False)
    try:
        await tuned.complete(REQUEST)
        await plain.complete(REQUEST)
    finally:
        await tuned.aclose()
        await plain.aclose()
    first, second = (r.body for r in server.requests)
    assert (first["max_tokens"], first["temperature"]) == (300, 0.7)
    assert second["max_tokens"] == REQUEST.max_output_tokens
    assert "temperature" not in second
