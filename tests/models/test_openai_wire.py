"""A4 / S12: the chat-completions adapter against a real server on loopback.

Every test asserts on what went over the wire (the server records each request body) or on
how a failure the server produced was classified.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from tests.models.loopback import (
    LoopbackServer,
    Scripted,
    closed_port,
    openai_chunk,
    openai_completion,
    openai_error,
    openai_stream,
    openai_tool_call,
    openai_tool_fragment,
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
from tidings.models.openai import OpenAIChatModel


@pytest_asyncio.fixture
async def model(server: LoopbackServer) -> AsyncIterator[OpenAIChatModel]:
    adapter = OpenAIChatModel("served-model", base_url=f"{server.base_url}/v1", timeout=5.0)
    yield adapter
    await adapter.aclose()


@pytest_asyncio.fixture
async def plain_model(server: LoopbackServer) -> AsyncIterator[OpenAIChatModel]:
    adapter = OpenAIChatModel(
        "served-model", base_url=f"{server.base_url}/v1", timeout=5.0, stream=False
    )
    yield adapter
    await adapter.aclose()


def text_stream(*pieces: str) -> Scripted:
    chunks = [openai_chunk(content=piece, role=i == 0) for i, piece in enumerate(pieces)]
    return openai_stream([*chunks, openai_chunk(finish_reason="stop"), openai_chunk(usage=(9, 3))])


async def test_a4_openai_request_mapping_system_history_suffix_tools(
    server: LoopbackServer, model: OpenAIChatModel
) -> None:
    server.push(text_stream("ok"))
    call = ToolCall(call_id="call_1", name="shell", arguments={"cmd": "ls -l"})
    await model.complete(
        request(
            PromptMessage(role="user", content="list files"),
            PromptMessage(role="assistant", content="", tool_calls=(call,)),
            PromptMessage(role="tool", content="a.txt", tool_call_id="call_1", tool_name="shell"),
            PromptMessage(role="assistant", content="There is a.txt."),
            PromptMessage(role="user", content="thanks"),
            suffix=("Now: 2026-01-01T00:00Z", "Task t1 finished"),
        )
    )

    [sent] = server.requests
    assert sent.path == "/v1/chat/completions"
    body = sent.body
    assert body["model"] == "served-model"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 512  # a base_url means a compatible server: max_tokens
    assert "max_completion_tokens" not in body
    assert body["messages"] == [
        {"role": "system", "content": "You are careful."},
        {"role": "user", "content": "list files"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "shell", "arguments": '{"cmd": "ls -l"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"},
        {"role": "assistant", "content": "There is a.txt."},
        {"role": "user", "content": "thanks"},
        # S12: runtime facts come after the history, as system messages, never as user words.
        {"role": "system", "content": "Now: 2026-01-01T00:00Z"},
        {"role": "system", "content": "Task t1 finished"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "shell",
                "description": "Run a command.",
                "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
            },
        }
    ]


async def test_a4_openai_no_tools_omits_the_tools_field(
    server: LoopbackServer, model: OpenAIChatModel
) -> None:
    server.push(text_stream("ok"))
    await model.complete(request(tools=()))
    assert "tools" not in server.requests[0].body


async def test_a4_openai_streamed_text_reaches_on_delta_piece_by_piece(
    server: LoopbackServer, model: OpenAIChatModel
) -> None:
    server.push(text_stream("Hel", "lo, ", "world"))
    pieces: list[str] = []

    reply = await model.complete(request(), on_delta=pieces.append)

    assert pieces == ["Hel", "lo, ", "world"]
    assert reply.text == "Hello, world"
    assert reply.tool_calls == ()
    assert reply.model == "served-model"
    assert reply.stop_reason == "stop"
    assert (reply.input_tokens, reply.output_tokens) == (9, 3)


async def test_a4_openai_streamed_tool_calls_assembled_from_fragments(
    server: LoopbackServer, model: OpenAIChatModel
) -> None:
    server.push(
        openai_stream(
            [
                openai_chunk(content="Running both.", role=True),
                openai_chunk(tool_calls=[openai_tool_fragment(0, call_id="c_a", name="shell")]),
                openai_chunk(tool_calls=[openai_tool_fragment(0, arguments='{"cm')]),
                openai_chunk(tool_calls=[openai_tool_fragment(1, call_id="c_b", name="shell")]),
                openai_chunk(tool_calls=[openai_tool_fragment(0, arguments='d": "ls"}')]),
                openai_chunk(tool_calls=[openai_tool_fragment(1, arguments='{"cmd": ')]),
                openai_chunk(tool_calls=[openai_tool_fragment(1, arguments='"pwd"}')]),
                openai_chunk(finish_reason="tool_calls"),
                openai_chunk(usage=(20, 12)),
            ]
        )
    )
    pieces: list[str] = []

    reply = await model.complete(request(), on_delta=pieces.append)

    assert pieces == ["Running both."]
    assert reply.text == "Running both."
    assert reply.tool_calls == (
        ToolCall(call_id="c_a", name="shell", arguments={"cmd": "ls"}),
        ToolCall(call_id="c_b", name="shell", arguments={"cmd": "pwd"}),
    )
    assert reply.stop_reason == "tool_calls"


async def test_a4_openai_tool_call_mapping_round_trip(
    server: LoopbackServer, model: OpenAIChatModel
) -> None:
    """A call the model made goes back on the next request paired with its result."""
    server.push(
        openai_stream(
            [
                openai_chunk(
                    tool_calls=[
                        openai_tool_fragment(
                            0, call_id="c_9", name="shell", arguments='{"cmd": "date"}'
                        )
                    ]
                ),
                openai_chunk(finish_reason="tool_calls"),
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
    assert messages[2]["tool_calls"] == [
        {
            "id": "c_9",
            "type": "function",
            "function": {"name": "shell", "arguments": '{"cmd": "date"}'},
        }
    ]
    assert messages[3] == {"role": "tool", "tool_call_id": "c_9", "content": "Mon"}


async def test_a4_openai_non_streamed_reply(
    server: LoopbackServer, plain_model: OpenAIChatModel
) -> None:
    server.push(
        openai_completion(
            text="Checking.",
            tool_calls=[openai_tool_call("c_1", "shell", '{"cmd": "uptime"}')],
            finish_reason="tool_calls",
            prompt_tokens=30,
            completion_tokens=5,
        )
    )
    pieces: list[str] = []

    reply = await plain_model.complete(request(), on_delta=pieces.append)

    assert "stream" not in server.requests[0].body
    assert pieces == []
    assert reply.text == "Checking."
    assert reply.tool_calls == (ToolCall(call_id="c_1", name="shell", arguments={"cmd": "uptime"}),)
    assert reply.stop_reason == "tool_calls"
    assert (reply.input_tokens, reply.output_tokens) == (30, 5)


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (429, ModelErrorKind.RETRYABLE),
        (500, ModelErrorKind.RETRYABLE),
        (502, ModelErrorKind.RETRYABLE),
        (503, ModelErrorKind.UNAVAILABLE),
        (529, ModelErrorKind.UNAVAILABLE),
        (402, ModelErrorKind.UNAVAILABLE),
        (404, ModelErrorKind.UNAVAILABLE),
        (408, ModelErrorKind.RETRYABLE),
        (400, ModelErrorKind.PERMANENT),
        (401, ModelErrorKind.PERMANENT),
        (403, ModelErrorKind.PERMANENT),
        (422, ModelErrorKind.PERMANENT),
    ],
)
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
async def test_a4_openai_http_errors_classified(
    server: LoopbackServer, status: int, kind: ModelErrorKind, stream: bool
) -> None:
    server.push(openai_error(status, f"status {status}"))
    adapter = OpenAIChatModel("served-model", base_url=f"{server.base_url}/v1", stream=stream)
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


async def test_a4_openai_exhausted_quota_is_unavailable(
    server: LoopbackServer, model: OpenAIChatModel
) -> None:
    server.push(openai_error(429, "You exceeded your current quota", code="insufficient_quota"))
    with pytest.raises(ModelError) as caught:
        await model.complete(request())
    assert caught.value.kind is ModelErrorKind.UNAVAILABLE
    assert caught.value.status == 429


async def test_a4_openai_connection_refused_is_unavailable() -> None:
    adapter = OpenAIChatModel("served-model", base_url=f"http://127.0.0.1:{closed_port()}/v1")
    try:
        with pytest.raises(ModelError) as caught:
            await adapter.complete(request())
    finally:
        await adapter.aclose()
    assert caught.value.kind is ModelErrorKind.UNAVAILABLE
    assert caught.value.status is None


async def test_a4_openai_connect_timeout_is_unavailable() -> None:
    # Nothing answers the connect at all: the model cannot be reached now, like a refusal.
    with silent_port() as port:
        adapter = OpenAIChatModel(
            "served-model", base_url=f"http://127.0.0.1:{port}/v1", timeout=0.5
        )
        try:
            with pytest.raises(ModelError) as caught:
                await adapter.complete(request())
        finally:
            await adapter.aclose()
    assert caught.value.kind is ModelErrorKind.UNAVAILABLE
    assert "cannot connect" in caught.value.message
    assert caught.value.status is None


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
async def test_a4_openai_connection_reset_before_the_reply_is_retryable(
    server: LoopbackServer, stream: bool
) -> None:
    # The server was reached and took the request, then reset the connection: try it again.
    server.push(Scripted(reset=True))
    adapter = OpenAIChatModel("served-model", base_url=f"{server.base_url}/v1", stream=stream)
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
async def test_a4_openai_timeout_is_retryable(server: LoopbackServer, stream: bool) -> None:
    server.push(Scripted(delay_seconds=10.0, body={}))
    adapter = OpenAIChatModel(
        "served-model", base_url=f"{server.base_url}/v1", timeout=0.5, stream=stream
    )
    try:
        with pytest.raises(ModelError) as caught:
            await adapter.complete(request())
    finally:
        await adapter.aclose()
    assert caught.value.kind is ModelErrorKind.RETRYABLE
    assert "timed out" in caught.value.message


async def test_a4_openai_stalled_stream_times_out_retryable(server: LoopbackServer) -> None:
    server.push(openai_stream([openai_chunk(content="Hel", role=True), 10.0]))
    adapter = OpenAIChatModel("served-model", base_url=f"{server.base_url}/v1", timeout=2.0)
    pieces: list[str] = []
    try:
        with pytest.raises(ModelError) as caught:
            await adapter.complete(request(), on_delta=pieces.append)
    finally:
        await adapter.aclose()
    assert pieces == ["Hel"]
    assert caught.value.kind is ModelErrorKind.RETRYABLE


async def test_a4_openai_stream_cut_before_finish_is_retryable(
    server: LoopbackServer, model: OpenAIChatModel
) -> None:
    server.push(
        openai_stream(
            [
                openai_chunk(
                    tool_calls=[openai_tool_fragment(0, call_id="c", name="shell", arguments="{")]
                )
            ],
            done=False,
            cut=True,
        )
    )
    with pytest.raises(ModelError) as caught:
        await model.complete(request())
    assert caught.value.kind is ModelErrorKind.RETRYABLE


async def test_a4_openai_stream_without_finish_reason_is_retryable(
    server: LoopbackServer, model: OpenAIChatModel
) -> None:
    server.push(openai_stream([openai_chunk(content="Hel", role=True)]))
    with pytest.raises(ModelError) as caught:
        await model.complete(request())
    assert caught.value.kind is ModelErrorKind.RETRYABLE
    assert "ended before" in caught.value.message


async def test_a4_openai_malformed_streamed_arguments_are_retryable(
    server: LoopbackServer, model: OpenAIChatModel
) -> None:
    server.push(
        openai_stream(
            [
                openai_chunk(tool_calls=[openai_tool_fragment(0, call_id="c", name="shell")]),
                openai_chunk(tool_calls=[openai_tool_fragment(0, arguments='{"cmd": "ls"')]),
                openai_chunk(finish_reason="tool_calls"),
            ]
        )
    )
    with pytest.raises(ModelError) as caught:
        await model.complete(request())
    assert caught.value.kind is ModelErrorKind.RETRYABLE
    assert "'shell'" in caught.value.message
    assert "not JSON" in caught.value.message


@pytest.mark.parametrize("arguments", ["{not json", "[1, 2]"])
async def test_a4_openai_malformed_arguments_are_retryable(
    server: LoopbackServer, plain_model: OpenAIChatModel, arguments: str
) -> None:
    server.push(
        openai_completion(
            tool_calls=[openai_tool_call("c", "shell", arguments)], finish_reason="tool_calls"
        )
    )
    with pytest.raises(ModelError) as caught:
        await plain_model.complete(request())
    assert caught.value.kind is ModelErrorKind.RETRYABLE
    assert "malformed" in caught.value.message


async def test_a4_openai_empty_arguments_mean_no_arguments(
    server: LoopbackServer, plain_model: OpenAIChatModel
) -> None:
    server.push(
        openai_completion(
            tool_calls=[openai_tool_call("c", "status", "")], finish_reason="tool_calls"
        )
    )
    reply = await plain_model.complete(request())
    assert reply.tool_calls == (ToolCall(call_id="c", name="status", arguments={}),)


async def test_a4_openai_key_from_environment_or_placeholder(
    server: LoopbackServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.push(text_stream("a"), text_stream("b"))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    keyless = OpenAIChatModel("served-model", base_url=f"{server.base_url}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    keyed = OpenAIChatModel("served-model", base_url=f"{server.base_url}/v1")
    try:
        await keyless.complete(request())
        await keyed.complete(request())
    finally:
        await keyless.aclose()
        await keyed.aclose()
    assert server.requests[0].headers["authorization"] == "Bearer not-needed"
    assert server.requests[1].headers["authorization"] == "Bearer sk-from-env"


async def test_a4_openai_token_limit_field_can_be_chosen(server: LoopbackServer) -> None:
    server.push(text_stream("ok"))
    adapter = OpenAIChatModel(
        "served-model",
        base_url=f"{server.base_url}/v1",
        token_limit_field="max_completion_tokens",
    )
    try:
        await adapter.complete(request())
    finally:
        await adapter.aclose()
    body = server.requests[0].body
    assert body["max_completion_tokens"] == 512
    assert "max_tokens" not in body


async def test_a4_openai_hosted_default_uses_max_completion_tokens() -> None:
    adapter = OpenAIChatModel("gpt-test", api_key="sk-test")
    await adapter.aclose()
    assert adapter.token_limit_field == "max_completion_tokens"


# -- B8: usage ----------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
async def test_b8_openai_reply_reports_tokens_and_cached_tokens(
    server: LoopbackServer, stream: bool
) -> None:
    if stream:
        server.push(openai_stream([
            openai_chunk(content="ok", role=True), openai_chunk(finish_reason="stop"),
            openai_chunk(usage=(120, 9), cached_tokens=100),
        ]))
    else:
        server.push(openai_completion(text="ok", prompt_tokens=120, completion_tokens=9,
                                      cached_tokens=100))
    adapter = OpenAIChatModel("served-model", base_url=f"{server.base_url}/v1", timeout=5.0,
                              stream=stream)
    try:
        reply = await adapter.complete(request())
    finally:
        await adapter.aclose()
    # prompt_tokens already counts the cached ones; OpenAI reports no cache writes.
    assert (reply.input_tokens, reply.output_tokens) == (120, 9)
    assert (reply.cache_read_tokens, reply.cache_write_tokens) == (100, None)


async def test_b8_openai_without_cache_details_reports_no_cache_tokens(
    server: LoopbackServer, plain_model: OpenAIChatModel
) -> None:
    server.push(openai_completion(text="ok", prompt_tokens=12, completion_tokens=3))
    reply = await plain_model.complete(request())
    assert (reply.input_tokens, reply.output_tokens) == (12, 3)
    assert (reply.cache_read_tokens, reply.cache_write_tokens) == (None, None)


async def test_b8_openai_unreadable_reply_still_reports_what_it_spent(
    server: LoopbackServer, model: OpenAIChatModel
) -> None:
    server.push(openai_stream([
        openai_chunk(tool_calls=[openai_tool_fragment(0, call_id="c", name="shell",
                                                      arguments='{"cmd": ')]),
        openai_chunk(finish_reason="tool_calls"),
        openai_chunk(usage=(50, 8), cached_tokens=30),
    ]))
    with pytest.raises(ModelError) as caught:
        await model.complete(request())
    assert caught.value.kind is ModelErrorKind.RETRYABLE
    assert (caught.value.input_tokens, caught.value.output_tokens) == (50, 8)
    assert caught.value.cache_read_tokens == 30


FORECAST = ToolSpec(name="weather.forecast", description="The forecast.",
                    parameters={"type": "object", "properties": {"city": {"type": "string"}}})


async def test_b4_openai_an_mcp_tools_dotted_name_is_sent_as_the_api_takes_it(
    server: LoopbackServer, model: OpenAIChatModel
) -> None:
    """OpenAI accepts only [A-Za-z0-9_-] in tool names: ``server.tool`` goes as
    ``server__tool`` (offered, called, answered) and comes back as tidings' own name."""
    server.push(
        openai_stream([
            openai_chunk(tool_calls=[openai_tool_fragment(
                0, call_id="c_1", name="weather__forecast", arguments='{"city": "Oslo"}')]),
            openai_chunk(finish_reason="tool_calls"),
        ]),
        text_stream("Rain."),
    )
    first = await model.complete(request(tools=(FORECAST,)))
    assert [c.name for c in first.tool_calls] == ["weather.forecast"]
    assert server.requests[0].body["tools"][0]["function"]["name"] == "weather__forecast"

    await model.complete(request(
        PromptMessage(role="user", content="hello"),
        PromptMessage(role="assistant", content="", tool_calls=first.tool_calls),
        PromptMessage(role="tool", content="rain", tool_call_id="c_1",
                      tool_name="weather.forecast"),
        tools=(FORECAST,),
    ))
    sent = server.requests[1].body["messages"]
    assert sent[2]["tool_calls"][0]["function"]["name"] == "weather__forecast"
