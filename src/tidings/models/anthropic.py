"""A :class:`~tidings.models.base.Model` over Anthropic's Messages API.

It talks through the official ``anthropic`` SDK. Import it only where the ``anthropic`` extra is
installed: :mod:`tidings.models` never imports this module.

On the wire (S12): ``system`` is a list of text blocks, the stable prompt first and marked as
the prompt-cache breakpoint (with ``tools``, which the API places before it, it is the cached
prefix), then one block per runtime fact of ``suffix``. Runtime facts are system blocks, never
user content. The history follows the API's shape: tool results travel as ``tool_result``
blocks in a user message, and consecutive messages of one role are merged into one. The SDK's
own retries are off by default: the turn runner retries according to the
:class:`~tidings.models.base.ModelErrorKind` raised here (A4).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Literal

import anthropic
import httpx2
from anthropic.types import (
    AssistantMessageParam,
    InputJSONDelta,
    Message,
    MessageDeltaUsage,
    MessageParam,
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawMessageDeltaEvent,
    RawMessageStartEvent,
    RawMessageStopEvent,
    RawMessageStreamEvent,
    TextBlock,
    TextBlockParam,
    TextDelta,
    ToolParam,
    ToolResultBlockParam,
    ToolUseBlock,
    ToolUseBlockParam,
    Usage,
    UserMessageParam,
)

from tidings.models.base import (
    DeltaCallback,
    ModelError,
    ModelErrorKind,
    ModelReply,
    ModelRequest,
    PromptMessage,
    ToolCall,
    ToolSpec,
    spent,
)
from tidings.models.failures import Answered, Sdk, classify, detail, malformed, status_kind
from tidings.models.names import ToolNames

API_KEY_ENV = "ANTHROPIC_API_KEY"
PLACEHOLDER_API_KEY = "not-needed"
"""Sent when no key is configured: a keyless gateway or test server ignores it."""

_PROVIDER = "anthropic"

_Block = TextBlockParam | ToolUseBlockParam | ToolResultBlockParam
_Role = Literal["user", "assistant"]

# Error types of an ``error`` event inside a 200 stream, where no HTTP status tells the cause.
_ERROR_TYPE_KINDS = {
    "overloaded_error": ModelErrorKind.UNAVAILABLE,
    "not_found_error": ModelErrorKind.UNAVAILABLE,
    "billing_error": ModelErrorKind.UNAVAILABLE,
    "rate_limit_error": ModelErrorKind.RETRYABLE,
    "api_error": ModelErrorKind.RETRYABLE,
    "timeout_error": ModelErrorKind.RETRYABLE,
}


class AnthropicModel:
    """One Anthropic model.

    ``name`` is the model name sent to the API. ``api_key`` defaults to ``$ANTHROPIC_API_KEY``
    and, when that is unset too, to a placeholder. ``timeout`` is in seconds and bounds each
    connect, write and read (for a stream: the wait for each event).
    """

    def __init__(
        self,
        name: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 0,
        stream: bool = True,
        context_chars: int | None = None,
        temperature: float | None = None,
        max_output_tokens: int | None = None,
    ) -> None:
        self.name = name
        self.stream = stream
        self.context_chars = context_chars
        self.temperature = temperature
        """The sampling temperature sent on every call (None: the provider's default)."""
        self.max_output_tokens = max_output_tokens
        """The output-token bound sent on every call (None: the request's)."""
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key or os.environ.get(API_KEY_ENV) or PLACEHOLDER_API_KEY,
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
        )

    async def aclose(self) -> None:
        """Close the HTTP connections. Idempotent."""
        await self._client.close()

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
    ) -> ModelReply:
        """Send ``request``; return the whole reply or raise a classified :class:`ModelError`."""
        names = ToolNames(request, model=self.name)  # "server.tool" as the API takes it
        return names.reply(await self._complete(names.request(request), on_delta))

    async def _complete(
        self, request: ModelRequest, on_delta: DeltaCallback | None
    ) -> ModelReply:
        system = wire_system(request)
        messages = wire_messages(request.messages)
        tools = [wire_tool(spec) for spec in request.tools]
        if tools and not request.system:
            # No stable prompt to carry the cache breakpoint: the tools are the whole prefix.
            tools[-1]["cache_control"] = {"type": "ephemeral"}
        limit = self.max_output_tokens or request.max_output_tokens
        # This SDK's signature has no temperature; the Messages API still takes it.
        extra = None if self.temperature is None else {"temperature": self.temperature}
        assembly = _StreamAssembly()
        try:
            if not self.stream:
                message = await self._client.messages.create(
                    model=self.name,
                    max_tokens=limit,
                    extra_body=extra,
                    system=system or anthropic.omit,
                    messages=messages,
                    tools=tools or anthropic.omit,
                )
                return self._reply_from_message(message)
            stream = await self._client.messages.create(
                model=self.name,
                max_tokens=limit,
                extra_body=extra,
                system=system or anthropic.omit,
                messages=messages,
                tools=tools or anthropic.omit,
                stream=True,
            )
            async with stream:
                async for event in stream:
                    assembly.add(event, on_delta)
            return self._reply_from_stream(assembly)
        except (anthropic.AnthropicError, httpx2.TransportError) as exc:
            # The SDK does not wrap a transport failure inside a stream. What the stream had
            # counted before it broke was spent all the same.
            raise spent(classify(exc, sdk=SDK, model=self.name), assembly.counts) from exc
        except ModelError as exc:
            # A reply that could not be read (cut, malformed) still spent its tokens.
            spent(exc, assembly.counts)
            raise

    def _reply_from_message(self, message: Message) -> ModelReply:
        text: list[str] = []
        calls: list[ToolCall] = []
        for block in message.content:
            if isinstance(block, TextBlock):
                text.append(block.text)
            elif isinstance(block, ToolUseBlock):
                calls.append(ToolCall(call_id=block.id, name=block.name, arguments=block.input))
        counts = _Counts()
        counts.read(message.usage)
        return counts.reply(
            text="".join(text), tool_calls=tuple(calls), model=self.name,
            stop_reason=message.stop_reason,
        )

    def _reply_from_stream(self, assembly: _StreamAssembly) -> ModelReply:
        if not assembly.stopped:
            # EOF before message_stop: the reply may be cut anywhere, even inside a tool call.
            raise _malformed(self.name, "the stream ended before message_stop")
        text: list[str] = []
        calls: list[ToolCall] = []
        for _, block in sorted(assembly.blocks.items()):
            if isinstance(block, _TextParts):
                text.extend(block.text)
            else:
                arguments = (
                    parse_arguments("".join(block.partial_json), model=self.name, tool=block.name)
                    if block.partial_json
                    else block.initial_input
                )
                calls.append(ToolCall(call_id=block.call_id, name=block.name, arguments=arguments))
        return assembly.counts.reply(
            text="".join(text), tool_calls=tuple(calls), model=self.name,
            stop_reason=assembly.stop_reason,
        )


# -- the request -------------------------------------------------------------------------------


def wire_system(request: ModelRequest) -> list[TextBlockParam]:
    """The system blocks: the stable prompt (the cache breakpoint), then one per runtime fact.

    Empty strings are left out: the API refuses empty text blocks.
    """
    blocks: list[TextBlockParam] = []
    if request.system:
        blocks.append(
            {"type": "text", "text": request.system, "cache_control": {"type": "ephemeral"}}
        )
    blocks.extend({"type": "text", "text": fact} for fact in request.suffix if fact)
    return blocks


def wire_messages(history: tuple[PromptMessage, ...]) -> list[MessageParam]:
    """The history as Messages API turns.

    Consecutive messages of one role become one message (a tool result is user content), as
    the API requires alternating roles. Within a user message the ``tool_result`` blocks come
    first, as the API requires; text that arrived with them follows.
    """
    turns: list[tuple[_Role, list[_Block]]] = []
    for message in history:
        role, blocks = _wire_blocks(message)
        if not blocks:
            continue
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, blocks))
    wired: list[MessageParam] = []
    for role, blocks in turns:
        if role == "user":
            ordered: list[_Block] = [b for b in blocks if b["type"] == "tool_result"]
            ordered.extend(b for b in blocks if b["type"] != "tool_result")
            user: UserMessageParam = {"role": "user", "content": ordered}
            wired.append(user)
        else:
            assistant: AssistantMessageParam = {"role": "assistant", "content": blocks}
            wired.append(assistant)
    return wired


def wire_tool(spec: ToolSpec) -> ToolParam:
    """A tool offered to the model."""
    return {
        "name": spec.name,
        "description": spec.description,
        "input_schema": dict(spec.parameters),
    }


def _wire_blocks(message: PromptMessage) -> tuple[_Role, list[_Block]]:
    if message.role == "tool":
        if message.tool_call_id is None:
            raise ModelError(
                ModelErrorKind.PERMANENT, "a tool message has no tool_call_id to pair it with"
            )
        result: ToolResultBlockParam = {
            "type": "tool_result",
            "tool_use_id": message.tool_call_id,
            "content": message.content,
        }
        return "user", [result]
    blocks: list[_Block] = []
    if message.content:  # the API refuses empty text blocks
        blocks.append({"type": "text", "text": message.content})
    if message.role == "user":
        return "user", blocks
    for call in message.tool_calls:
        use: ToolUseBlockParam = {
            "type": "tool_use",
            "id": call.call_id,
            "name": call.name,
            "input": dict(call.arguments),
        }
        blocks.append(use)
    return "assistant", blocks


# -- the reply ---------------------------------------------------------------------------------


@dataclass
class _TextParts:
    text: list[str] = field(default_factory=list)


@dataclass
class _ToolUseParts:
    call_id: str
    name: str
    initial_input: dict[str, Any]
    partial_json: list[str] = field(default_factory=list)


@dataclass
class _Counts:
    """A call's token counts as the API reports them: the prompt in three parts (uncached,
    read from the cache, written to it) and the output."""

    uncached: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    output_tokens: int | None = None

    @property
    def input_tokens(self) -> int | None:
        # The API counts cache writes and reads apart from ``input_tokens``; the reply reports
        # every prompt token, as the chat-completions ``prompt_tokens`` does.
        if self.uncached is None:
            return None
        return self.uncached + (self.cache_read_tokens or 0) + (self.cache_write_tokens or 0)

    def read(self, usage: Usage | MessageDeltaUsage) -> None:
        """Take the counts ``usage`` reports. A ``message_delta``'s are cumulative, and a count
        it leaves out keeps the value ``message_start`` gave."""
        if usage.input_tokens is not None:
            self.uncached = usage.input_tokens
        if usage.cache_read_input_tokens is not None:
            self.cache_read_tokens = usage.cache_read_input_tokens
        if usage.cache_creation_input_tokens is not None:
            self.cache_write_tokens = usage.cache_creation_input_tokens
        if usage.output_tokens is not None:
            self.output_tokens = usage.output_tokens

    def reply(
        self, *, text: str, tool_calls: tuple[ToolCall, ...], model: str, stop_reason: str | None
    ) -> ModelReply:
        return ModelReply(
            text=text, tool_calls=tool_calls, model=model, stop_reason=stop_reason,
            input_tokens=self.input_tokens, output_tokens=self.output_tokens,
            cache_read_tokens=self.cache_read_tokens, cache_write_tokens=self.cache_write_tokens,
        )


@dataclass
class _StreamAssembly:
    """The pieces of a streamed reply, gathered event by event, by content-block index."""

    blocks: dict[int, _TextParts | _ToolUseParts] = field(default_factory=dict)
    stopped: bool = False
    stop_reason: str | None = None
    counts: _Counts = field(default_factory=_Counts)

    def add(self, event: RawMessageStreamEvent, on_delta: DeltaCallback | None) -> None:
        if isinstance(event, RawMessageStartEvent):
            self.counts.read(event.message.usage)
        elif isinstance(event, RawContentBlockStartEvent):
            block = event.content_block
            if isinstance(block, TextBlock):
                self.blocks[event.index] = _TextParts()
                self._text(event.index, block.text, on_delta)
            elif isinstance(block, ToolUseBlock):
                self.blocks[event.index] = _ToolUseParts(block.id, block.name, dict(block.input))
            # Other blocks (thinking, server tools) are not part of the reply.
        elif isinstance(event, RawContentBlockDeltaEvent):
            delta = event.delta
            if isinstance(delta, TextDelta):
                self._text(event.index, delta.text, on_delta)
            elif isinstance(delta, InputJSONDelta):
                parts = self.blocks.get(event.index)
                if isinstance(parts, _ToolUseParts) and delta.partial_json:
                    parts.partial_json.append(delta.partial_json)
        elif isinstance(event, RawMessageDeltaEvent):
            if event.delta.stop_reason is not None:
                self.stop_reason = event.delta.stop_reason
            self.counts.read(event.usage)
        elif isinstance(event, RawMessageStopEvent):
            self.stopped = True

    def _text(self, index: int, piece: str, on_delta: DeltaCallback | None) -> None:
        parts = self.blocks.get(index)
        if not piece or not isinstance(parts, _TextParts):
            return
        parts.text.append(piece)
        if on_delta is not None:
            on_delta(piece)


def parse_arguments(raw: str, *, model: str, tool: str) -> dict[str, Any]:
    """A tool call's streamed JSON input as an object; a malformed one is a retryable failure.

    A model that wrote broken JSON (or was cut off at ``max_tokens`` mid-call) may well write
    a good call when asked again, so this is ``retryable``, not ``permanent``.
    """
    try:
        arguments = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise _malformed(model, f"the input of tool call {tool!r} is not JSON ({exc})") from exc
    if not isinstance(arguments, dict):
        raise _malformed(
            model,
            f"the input of tool call {tool!r} is a JSON {type(arguments).__name__}, not an object",
        )
    return arguments


# -- failures ----------------------------------------------------------------------------------


def _answered(exc: anthropic.APIStatusError) -> Answered:
    said = detail(exc.api_message or exc.message)
    if exc.status_code < 400:  # an ``error`` event inside a 200 stream: its type tells
        kind = _ERROR_TYPE_KINDS.get(exc.type or "", ModelErrorKind.PERMANENT)
        return kind, None, f"{exc.type or 'an error'}: {said}"
    return status_kind(exc.status_code), exc.status_code, f"{exc.status_code}: {said}"


SDK = Sdk(
    provider=_PROVIDER,
    api_error=anthropic.APIError,
    status_error=anthropic.APIStatusError,
    connection_error=anthropic.APIConnectionError,
    timeout_error=anthropic.APITimeoutError,
    answered=_answered,
)
"""How this SDK's failures are told (the rule is :mod:`tidings.models.failures`')."""


def _malformed(model: str, what: str) -> ModelError:
    return malformed(_PROVIDER, model, what)
