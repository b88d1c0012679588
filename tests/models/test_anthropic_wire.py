"""A4 / S12: the Messages API adapter against a real server on loopback.

Every test asserts on what went over the wire (the server records each request body) or on
how a failure the server produced was classified.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from tests.models.loopback import (
    SHELL,
    LoopbackServer,
    Scripted,
    anthropic_end,
    anthropic_error,
    anthropic_event,
    anthropic_message,
    anthropic_start,
    anthropic_stream,
    anthropic_text,
    anthropic_text_block,
    anthropic_tool_block,
    anthropic_tool_use,
    closed_port,
    request,
    silent_port,
)
from tidings.models import (
    ModelError,
    ModelErrorKind,
    PromptMessage,
    ToolCall,
    ToolSpec,
)
from tidings.models.anthropic import AnthropicModel

STATUS = ToolSpec(name="status", description="Show the status.")


@pytest_asyncio.fixture
async def model(server: LoopbackServer) -> AsyncIterator[AnthropicModel]:
    adapter = AnthropicModel("served-model", base_url=server.base_url, timeout=5.0)
    yield adapter
    await adapter.aclose()


@pytest_asyncio.fixture
async def plain_model(server: LoopbackServer) -> AsyncIterator[AnthropicModel]:
    adapter = AnthropicModel("served-model", base_url=server.base_url, timeout=5.0, stream=False)
    yield adapter
    await adapter.aclose()


def text_stream(*pieces: str) -> Scripted:
    return anthropic_stream(
        [anthropic_start(), *anthropic_text_block(0, pieces), *anthropic_end(output_tokens=3)]
    )


async def test_a4_anthropic_request_mapping_system_blocks_history_tools(
    server: LoopbackServer, model: AnthropicModel
) -> None:
    server.push(text_stream("ok"))
    ls = ToolCall(call_id="tu_1", name="shell", arguments={"cmd": "ls"})
    pwd = ToolCall(call_id="tu_2", name="shell", arguments={"cmd": "pwd"})
    await model.complete(
        request(
            PromptMessage(role="user", content="where am I"),
            PromptMessage(role="user", content="and what is here"),
            PromptMessage(role="assistant", content="Looking.", tool_calls=(ls, pwd)),
            PromptMessage(role="tool", content="a.txt", tool_call_id="tu_1"),
            PromptMessage(role="tool", content="/home", tool_call_id="tu_2"),
            PromptMessage(role="user", content="hurry"),
            PromptMessage(role="assistant", content="In /home, with a.txt."),
            suffix=("Now: 2026-01-01T00:00Z", "Task t1 finished"),
        )
    )

    [sent] = server.requests
    assert sent.path == "/v1/messages"
    body = sent.body
    assert body["model"] == "served-model"
    assert body["max_tokens"] == 512
    assert body["stream"] is True
    # S12: the stable prompt is the cached block; runtime facts are system blocks after it.
    assert body["system"] == [
        {"type": "text", "text": "You are careful.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Now: 2026-01-01T00:00Z"},
        {"type": "text", "text": "Task t1 finished"},
    ]
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "where am I"},
                {"type": "text", "text": "and what is here"},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "tu_1", "name": "shell", "input": {"cmd": "ls"}},
                {"type": "tool_use", "id": "tu_2", "name": "shell", "input": {"cmd": "pwd"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "tu_1", "content": "a.txt"},
                {"type": "tool_result", "tool_use_id": "tu_2", "content": "/home"},
                {"type": "text", "text": "hurry"},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "In /home, with a.txt."}]},
    ]
    assert body["tools"] == [
        {
            "name": "shell",
            "description": "Run a command.",
            "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}},
        }
    ]


async def test_a4_anthropic_runtime_facts_never_reach_user_content(
    server: LoopbackServer, model: AnthropicModel
) -> None:
    server.push(text_stream("ok"))
    await model.complete(request(suffix=("FACT-7f3",)))
    messages = server.requests[0].body["messages"]
    assert "FACT-7f3" not in repr(messages)
    assert server.requests[0].body["system"][-1] == {"type": "text", "text": "FACT-7f3"}


async def test_a4_anthropic_tool_results_lead_their_user_message(
    server: LoopbackServer, model: AnthropicModel
) -> None:
    """A user message that arrived before a result is merged after it: results come first."""
    server.push(text_stream("ok"))
    call = ToolCall(call_id="tu_1", name="shell", arguments={})
    await model.complete(
        request(
            PromptMessage(role="user", content="go"),
            PromptMessage(role="assistant", content="", tool_calls=(call,)),
            PromptMessage(role="user", content="also this"),
            PromptMessage(role="tool", content="done", tool_call_id="tu_1"),
        )
    )
    assert server.requests[0].body["messages"][1:] == [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "tu_1", "name": "shell", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "tu_1", "content": "done"},
                {"type": "text", "text": "also this"},
            ],
        },
    ]


async def test_a4_anthropic_without_system_the_tools_carry_the_cache_breakpoint(
    server: LoopbackServer, model: AnthropicModel
) -> None:
    server.push(text_stream("ok"), text_stream("ok"))
    await model.complete(request(system="", tools=(SHELL, STATUS)))
    await model.complete(request(system="", tools=()))
    first, second = (sent.body for sent in server.requests)
    assert "system" not in first
    assert "cache_control" not in first["tools"][0]
    assert first["tools"][1]["cache_control"] == {"type": "ephemeral"}
    assert "system" not in second
    assert "tools" not in second


async def test_a4_anthropic_streamed_text_reaches_on_delta_piece_by_piece(
    server: LoopbackServer, model: AnthropicModel
) -> None:
    server.push(
        anthropic_stream(
            [
                anthropic_start(input_tokens=5, cache_read_input_tokens=100),
                anthropic_event("ping"),
                *anthropic_text_block(0, ["Hel", "lo, ", "world"]),
                *anthropic_end(output_tokens=3),
            ]
        )
    )
    pieces: list[str] = []

    reply = await model.complete(request(), on_delta=pieces.append)

    assert pieces == ["Hel", "lo, ", "world"]
    assert reply.text == "Hello, world"
    assert reply.tool_calls == ()
    assert reply.model == "served-model"
    assert reply.stop_reason == "end_turn"
    assert (reply.input_tokens, reply.output_tokens) == (105, 3)  # cache reads count as input


async def test_a4_anthropic_streamed_tool_use_assembled_from_json_deltas(
    server: LoopbackServer, model: AnthropicModel
) -> None:
    server.push(
        anthropic_stream(
            [
                anthropic_start(),
                *anthropic_text_block(0, ["Running."]),
                *anthropic_tool_block(1, "tu_a", "shell", ['{"cm', 'd": "l', 's"}']),
                *anthropic_tool_block(2, "tu_b", "status", []),  # no parameters: no deltas
                *anthropic_end("tool_use", output_tokens=40),
            ]
        )
    )
    pieces: list[str] = []

    reply = await model.complete(request(), on_delta=pieces.append)

    assert pieces == ["Running."]
    assert reply.text == "Running."
    assert reply.tool_calls == (
        ToolCall(call_id="tu_a", name="shell", arguments={"cmd": "ls"}),
        ToolCall(call_id="tu_b", name="status", arguments={}),
    )
    assert reply.stop_reason == "tool_use"
    assert reply.output_tokens == 40


async def test_a4_anthropic_tool_call_mapping_round_trip(
    server: LoopbackServer, model: AnthropicModel
) -> None:
    """A call the model made goes back on the next request paired with its result."""
    server.push(
        anthropic_stream(
            [
                anthropic_start(),
                *anthropic_tool_block(0, "tu_9", "shell", ['{"cmd": "date"}']),
                *anthropic_end("tool_use"),
            ]
        ),
        text_stream("It is Monday."),
    )
    first = await model.complete(request())
    [call] = first.tool_calls

    second = await model.complete(
        request(
            PromptMessage(role="user", content="hello"),
            PromptMessage(role="assistant", content=first.text, tool_calls=first.tool_calls),
            PromptMessage(role="tool", content="Mon", tool_call_id=call.call_id),
        )
    )

    assert second.text == "It is Monday."
    messages = server.requests[1].body["messages"]
    assert messages[1] == {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "tu_9", "name": "shell", "input": {"cmd": "date"}}],
    }
    assert messages[2] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "tu_9", "content": "Mon"}],
    }


async def test_a4_anthropic_non_streamed_reply(
    server: LoopbackServer, plain_model: AnthropicModel
) -> None:
    server.push(
        anthropic_message(
            [anthropic_text("Checking."), anthropic_tool_use("tu_1", "shell", {"cmd": "uptime"})],
            stop_reason="tool_use",
            input_tokens=30,
            output_tokens=5,
            cache_read_input_tokens=70,
        )
    )
    pieces: list[str] = []

    reply = await plain_model.complete(request(), on_delta=pieces.append)

    assert "stream" not in server.requests[0].body
    assert pieces == []
    assert reply.text == "Checking."
    assert reply.tool_calls == (
        ToolCall(call_id="tu_1", name="shell", arguments={"cmd": "uptime"}),
    )
    assert reply.stop_reason == "tool_use"
    assert (reply.input_tokens, reply.output_tokens) == (100, 5)


@pytest.mark.parametrize(
    ("status", "error_type", "kind"),
    [
        (429, "rate_limit_error", ModelErrorKind.RETRYABLE),
        (500, "api_error", ModelErrorKind.RETRYABLE),
        (502, "api_error", ModelErrorKind.RETRYABLE),
        (503, "api_error", ModelErrorKind.UNAVAILABLE),
        (529, "overloaded_error", ModelErrorKind.UNAVAILABLE),
        (404, "not_found_error", ModelErrorKind.UNAVAILABLE),
        (402, "billing_error", ModelErrorKind.UNAVAILABLE),
        (408, "timeout_error", ModelErrorKind.RETRYABLE),
        (400, "invalid_request_error", ModelErrorKind.PERMANENT),
        (401, "authentication_error", ModelErrorKind.PERMANENT),
        (403, "permission_error", ModelErrorKind.PERMANENT),
        (413, "request_too_large", ModelErrorKind.PERMANENT),
        (422, "invalid_request_error", ModelErrorKind.PERMANENT),
    ],
)
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
async def test_a4_anthropic_http_errors_classified(
    server: LoopbackServer, status: int, error_type: str, kind: ModelErrorKind, stream: bool
) -> None:
    server.push(anthropic_error(status, error_type, f"status {status}"))
    adapter = AnthropicModel("served-model", base_url=server.base_url, stream=stream)
    try:
        with pytest.raises(ModelError) as caught:
            await adapter.complete(request())
    finally:
        await adapter.aclose()
    assert caught.value.kind is kind
    assert caught.value.status == status
    assert caught.value.model == "served-model"
    assert f"status {status}" in caught.value.message
    assert len(server.requests) == 1  # the SDK did not retry: the turn runner does


@pytest.mark.parametrize(
    ("error_type", "kind"),
    [
        ("overloaded_error", ModelErrorKind.UNAVAILABLE),
        ("api_error", ModelErrorKind.RETRYABLE),
        ("invalid_request_error", ModelErrorKind.PERMANENT),
    ],
)
async def test_a4_anthropic_error_event_inside_a_stream_classified_by_type(
    server: LoopbackServer, model: AnthropicModel, error_type: str, kind: ModelErrorKind
) -> None:
    server.push(
        anthropic_stream(
            [
                anthropic_start(),
                *anthropic_text_block(0, ["Hel"]),
                anthropic_event("error", error={"type": error_type, "message": "mid-stream"}),
            ]
        )
    )
    with pytest.raises(ModelError) as caught:
        await model.complete(request())
    assert caught.value.kind is kind
    assert caught.value.status is None  # the HTTP status was 200
    assert error_type in caught.value.message


async def test_a4_anthropic_connection_refused_is_unavailable() -> None:
    adapter = AnthropicModel("served-model", base_url=f"http://127.0.0.1:{closed_port()}")
    try:
        with pytest.raises(ModelError) as caught:
            await adapter.complete(request())
    finally:
        await adapter.aclose()
    assert caught.value.kind is ModelErrorKind.UNAVAILABLE
    assert caught.value.status is None


async def test_a4_anthropic_connect_timeout_is_unavailable() -> None:
    # Nothing answers the connect at all: the model cannot be reached now, like a refusal.
    with silent_port() as port:
        adapter = AnthropicModel("served-model", base_url=f"http://127.0.0.1:{port}", timeout=0.5)
        try:
            with pytest.raises(ModelError) as caught:
                await adapter.complete(request())
        finally:
            await adapter.aclose()
    assert caught.value.kind is ModelErrorKind.UNAVAILABLE
    assert "cannot connect" in caught.value.message
    assert caught.value.status is None


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
async def test_a4_anthropic_connection_reset_before_the_reply_is_retryable(
    server: LoopbackServer, stream: bool
) -> None:
    # The server was reached and took the request, then reset the connection: try it again.
    server.push(Scripted(reset=True))
    adapter = AnthropicModel("served-model", base_url=f"{server.base_url}", stream=stream)
    try:
        with pytest.raises(ModelError) as caught:
            await adapter.complete(request())
    finally:
        await adapter.aclose()
    assert caught.value.kind is ModelErrorKind.RETRYABLE
    assert "connection broke" in caught.value.message
    assert caught.value.status is None
    assert len(server.requests) == 1  # the SDK did not retry: the turn runner does


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
async def test_a4_anthropic_timeout_is_retryable(server: LoopbackServer, stream: bool) -> None:
    server.push(Scripted(delay_seconds=10.0, body={}))
    adapter = AnthropicModel("served-model", base_url=server.base_url, timeout=0.5, stream=stream)
    try:
        with pytest.raises(ModelError) as caught:
            await adapter.complete(request())
    finally:
        await adapter.aclose()
    assert caught.value.kind is ModelErrorKind.RETRYABLE
    assert "timed out" in caught.value.message


async def test_a4_anthropic_stalled_stream_times_out_retryable(server: LoopbackServer) -> None:
    server.push(anthropic_stream([anthropic_start(), *anthropic_text_block(0, ["Hel"]), 10.0]))
    adapter = AnthropicModel("served-model", base_url=server.base_url, timeout=2.0)
    pieces: list[str] = []
    try:
        with pytest.raises(ModelError) as caught:
            await adapter.complete(request(), on_delta=pieces.append)
    finally:
        await adapter.aclose()
    assert pieces == ["Hel"]
    assert caught.value.kind is ModelErrorKind.RETRYABLE
    assert "timed out" in caught.value.message


async def test_a4_anthropic_stream_cut_mid_reply_is_retryable(
    server: LoopbackServer, model: AnthropicModel
) -> None:
    server.push(
        anthropic_stream(
            [anthropic_start(), *anthropic_tool_block(0, "tu", "shell", ['{"cmd"'])], cut=True
        )
    )
    with pytest.raises(ModelError) as caught:
        await model.complete(request())
    assert caught.value.kind is ModelErrorKind.RETRYABLE


async def test_a4_anthropic_stream_without_message_stop_is_retryable(
    server: LoopbackServer, model: AnthropicModel
) -> None:
    server.push(anthropic_stream([anthropic_start(), *anthropic_text_block(0, ["Hel"])]))
    with pytest.raises(ModelError) as caught:
        await model.complete(request())
    assert caught.value.kind is ModelErrorKind.RETRYABLE
    assert "message_stop" in caught.value.message


@pytest.mark.parametrize("partial_json", [['{"cmd": ', '"ls"'], ["[1, ", "2]"]])
async def test_a4_anthropic_malformed_tool_input_is_retryable(
    server: LoopbackServer, model: AnthropicModel, partial_json: list[str]
) -> None:
    server.push(
        anthropic_stream(
            [
                anthropic_start(),
                *anthropic_tool_block(0, "tu", "shell", partial_json),
                *anthropic_end("max_tokens"),
            ]
        )
    )
    with pytest.raises(ModelError) as caught:
        await model.complete(request())
    assert caught.value.kind is ModelErrorKind.RETRYABLE
    assert "malformed" in caught.value.message
    assert "'shell'" in caught.value.message


async def test_a4_anthropic_key_from_environment_or_placeholder(
    server: LoopbackServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.push(text_stream("a"), text_stream("b"))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    keyless = AnthropicModel("served-model", base_url=server.base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-env")
    keyed = AnthropicModel("served-model", base_url=server.base_url)
    try:
        await keyless.complete(request())
        await keyed.complete(request())
    finally:
        await keyless.aclose()
        await keyed.aclose()
    # This SDK sends the key as a bearer token.
    assert server.requests[0].headers["authorization"] == "Bearer not-needed"
    assert server.requests[1].headers["authorization"] == "Bearer sk-ant-from-env"


# -- B8: usage ----------------------------------------------------------------------------------


async def test_b8_anthropic_streamed_usage_from_message_start_and_message_delta(
    server: LoopbackServer, model: AnthropicModel
) -> None:
    server.push(anthropic_stream([
        anthropic_start(input_tokens=5, cache_read_input_tokens=100,
                        cache_creation_input_tokens=20),
        *anthropic_text_block(0, ["ok"]),
        # The delta's counts are cumulative; one it sends null keeps message_start's value.
        *anthropic_end(output_tokens=9, input_tokens=5, cache_read_input_tokens=None,
                       cache_creation_input_tokens=20),
    ]))
    reply = await model.complete(request())
    # input_tokens is every prompt token: uncached, read from the cache and written to it.
    assert (reply.input_tokens, reply.output_tokens) == (125, 9)
    assert (reply.cache_read_tokens, reply.cache_write_tokens) == (100, 20)


async def test_b8_anthropic_message_delta_may_bring_the_cache_counts(
    server: LoopbackServer, model: AnthropicModel
) -> None:
    server.push(anthropic_stream([
        anthropic_start(input_tokens=5),
        *anthropic_text_block(0, ["ok"]),
        *anthropic_end(output_tokens=2, cache_read_input_tokens=40,
                       cache_creation_input_tokens=0),
    ]))
    reply = await model.complete(request())
    assert (reply.input_tokens, reply.output_tokens) == (45, 2)
    assert (reply.cache_read_tokens, reply.cache_write_tokens) == (40, 0)


async def test_b8_anthropic_non_streamed_usage_with_cache_tokens(
    server: LoopbackServer, plain_model: AnthropicModel
) -> None:
    server.push(anthropic_message([anthropic_text("ok")], input_tokens=30, output_tokens=5,
                                  cache_read_input_tokens=70, cache_creation_input_tokens=10))
    reply = await plain_model.complete(request())
    assert (reply.input_tokens, reply.output_tokens) == (110, 5)
    assert (reply.cache_read_tokens, reply.cache_write_tokens) == (70, 10)


async def test_b8_anthropic_stream_cut_after_message_start_reports_what_it_spent(
    server: LoopbackServer, model: AnthropicModel
) -> None:
    server.push(anthropic_stream(
        [anthropic_start(input_tokens=5, cache_read_input_tokens=100),
         *anthropic_text_block(0, ["Hel"])],
        cut=True,
    ))
    with pytest.raises(ModelError) as caught:
        await model.complete(request())
    assert caught.value.kind is ModelErrorKind.RETRYABLE
    assert (caught.value.input_tokens, caught.value.cache_read_tokens) == (105, 100)
    assert caught.value.output_tokens == 1  # what message_start counted


FORECAST = ToolSpec(name="weather.forecast", description="The forecast.",
                    parameters={"type": "object", "properties": {"city": {"type": "string"}}})


async def test_b4_anthropic_an_mcp_tools_dotted_name_is_sent_as_the_api_takes_it(
    server: LoopbackServer, model: AnthropicModel
) -> None:
    """Anthropic accepts only [A-Za-z0-9_-] in tool names: ``server.tool`` goes as
    ``server__tool`` (offered, called, answered) and comes back as tidings' own name."""
    server.push(
        anthropic_stream([
            anthropic_start(),
            *anthropic_tool_block(0, "tu_1", "weather__forecast", ['{"city": "Oslo"}']),
            *anthropic_end("tool_use"),
        ]),
        text_stream("Rain."),
    )
    first = await model.complete(request(tools=(FORECAST,)))
    assert [c.name for c in first.tool_calls] == ["weather.forecast"]
    assert server.requests[0].body["tools"][0]["name"] == "weather__forecast"

    await model.complete(request(
        PromptMessage(role="user", content="hello"),
        PromptMessage(role="assistant", content="", tool_calls=first.tool_calls),
        PromptMessage(role="tool", content="rain", tool_call_id="tu_1",
                      tool_name="weather.forecast"),
        tools=(FORECAST,),
    ))
    sent = server.requests[1].body["messages"]
    assert sent[1]["content"][0]["name"] == "weather__forecast"
