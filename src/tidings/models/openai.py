"""A :class:`~tidings.models.base.Model` over OpenAI-compatible chat-completions servers.

Hosted OpenAI, vLLM, Ollama and llama.cpp all speak ``POST /v1/chat/completions``; this adapter
talks to them through the official ``openai`` SDK. Import it only where the ``openai`` extra is
installed: :mod:`tidings.models` never imports this module.

On the wire, in this order (S12): the stable ``system`` prompt as the first system message,
the history, then each runtime fact of ``suffix`` as a trailing *system* message, never a user
one. The SDK's own retries are off by default: the turn runner retries, with its own backoff,
according to the :class:`~tidings.models.base.ModelErrorKind` raised here (A4).
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx2
import openai
from openai.types import CompletionUsage
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionAssistantMessageParam,
    ChatCompletionChunk,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageFunctionToolCallParam,
    ChatCompletionMessageParam,
    ChatCompletionSystemMessageParam,
    ChatCompletionToolMessageParam,
    ChatCompletionUserMessageParam,
)
from openai.types.chat.chat_completion_chunk import ChoiceDeltaToolCall

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

API_KEY_ENV = "OPENAI_API_KEY"
PLACEHOLDER_API_KEY = "not-needed"
"""Sent when no key is configured: local servers ignore it, and the SDK refuses to start without
one."""

TokenLimitField = Literal["max_tokens", "max_completion_tokens"]

_PROVIDER = "openai"


class OpenAIChatModel:
    """One model on an OpenAI-compatible chat-completions server.

    ``name`` is the model name sent to the server. ``api_key`` defaults to ``$OPENAI_API_KEY``
    and, when that is unset too, to a placeholder so keyless local servers work. ``timeout`` is
    in seconds and bounds each connect, write and read (for a stream: the wait for each chunk).
    ``token_limit_field`` names the output-token bound: hosted OpenAI's reasoning models accept
    only ``max_completion_tokens``, while older local servers know only ``max_tokens``; the
    default picks the first for the hosted API (no ``base_url``) and the second otherwise.
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
        token_limit_field: TokenLimitField | None = None,
    ) -> None:
        self.name = name
        self.stream = stream
        self.context_chars = context_chars
        self.temperature = temperature
        """The sampling temperature sent on every call (None: the provider's default)."""
        self.max_output_tokens = max_output_tokens
        """The output-token bound sent on every call (None: the request's)."""
        self.token_limit_field: TokenLimitField = token_limit_field or (
            "max_completion_tokens" if base_url is None else "max_tokens"
        )
        self._client = openai.AsyncOpenAI(
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
        messages = wire_messages(request)
        tools = [wire_tool(spec) for spec in request.tools] or openai.omit
        limit = self.max_output_tokens or request.max_output_tokens
        temperature = openai.omit if self.temperature is None else self.temperature
        max_tokens = limit if self.token_limit_field == "max_tokens" else openai.omit
        max_completion_tokens = (
            limit if self.token_limit_field == "max_completion_tokens" else openai.omit
        )
        assembly = _StreamAssembly()
        try:
            if not self.stream:
                completion = await self._client.chat.completions.create(
                    model=self.name,
                    messages=messages,
                    tools=tools,
                    max_tokens=max_tokens,
                    max_completion_tokens=max_completion_tokens,
                    temperature=temperature,
                )
                return self._reply_from_completion(completion, assembly.counts)
            stream = await self._client.chat.completions.create(
                model=self.name,
                messages=messages,
                tools=tools,
                max_tokens=max_tokens,
                max_completion_tokens=max_completion_tokens,
                temperature=temperature,
                stream=True,
                stream_options={"include_usage": True},
            )
            async with stream:
                async for chunk in stream:
                    assembly.add(chunk, on_delta)
            return self._reply_from_stream(assembly)
        except (openai.OpenAIError, httpx2.TransportError) as exc:
            # A transport failure inside a stream reaches us unwrapped by the SDK. What the
            # stream had counted before it broke was spent all the same.
            raise spent(classify(exc, sdk=SDK, model=self.name), assembly.counts) from exc
        except ModelError as exc:
            # A reply that could not be read (cut, malformed) still spent its tokens.
            spent(exc, assembly.counts)
            raise

    def _reply_from_completion(
        self, completion: ChatCompletion, counts: _Counts
    ) -> ModelReply:
        if completion.usage is not None:
            counts.read(completion.usage)
        choice = next((c for c in completion.choices if c.index == 0), None)
        if choice is None:
            raise _malformed(self.name, "the reply holds no choice")
        message = choice.message
        calls: list[ToolCall] = []
        for call in message.tool_calls or ():
            if not isinstance(call, ChatCompletionMessageFunctionToolCall):
                raise _malformed(self.name, f"tool call of unknown type {call.type!r}")
            calls.append(
                ToolCall(
                    call_id=call.id or _new_call_id(),
                    name=call.function.name,
                    arguments=parse_arguments(
                        call.function.arguments, model=self.name, tool=call.function.name
                    ),
                )
            )
        return counts.reply(
            text=message.content or message.refusal or "", tool_calls=tuple(calls),
            model=self.name, stop_reason=choice.finish_reason,
        )

    def _reply_from_stream(self, assembly: _StreamAssembly) -> ModelReply:
        if assembly.finish_reason is None:
            # EOF before the last choice chunk: the reply may be cut anywhere, even mid-call.
            raise _malformed(self.name, "the stream ended before the reply was finished")
        calls = tuple(
            ToolCall(
                call_id=part.call_id or _new_call_id(),
                name=part.name,
                arguments=parse_arguments("".join(part.arguments), model=self.name, tool=part.name),
            )
            for _, part in sorted(assembly.tool_calls.items())
        )
        if any(not call.name for call in calls):
            raise _malformed(self.name, "a streamed tool call has no name")
        return assembly.counts.reply(
            text="".join(assembly.text), tool_calls=calls, model=self.name,
            stop_reason=assembly.finish_reason,
        )


# -- the request -------------------------------------------------------------------------------


def wire_messages(request: ModelRequest) -> list[ChatCompletionMessageParam]:
    """The chat messages for ``request``: system, history, then the suffix as system messages."""
    messages: list[ChatCompletionMessageParam] = []
    if request.system:
        messages.append(_system(request.system))
    messages.extend(wire_message(message) for message in request.messages)
    messages.extend(_system(fact) for fact in request.suffix if fact)
    return messages


def wire_message(message: PromptMessage) -> ChatCompletionMessageParam:
    """One history message in chat-completions form."""
    if message.role == "user":
        user: ChatCompletionUserMessageParam = {"role": "user", "content": message.content}
        return user
    if message.role == "assistant":
        assistant: ChatCompletionAssistantMessageParam = {"role": "assistant"}
        # An assistant turn that only called tools has null content, as the API returns it.
        assistant["content"] = message.content or None
        if message.tool_calls:
            assistant["tool_calls"] = [_wire_call(call) for call in message.tool_calls]
        return assistant
    if message.tool_call_id is None:
        raise ModelError(
            ModelErrorKind.PERMANENT, "a tool message has no tool_call_id to pair it with"
        )
    tool: ChatCompletionToolMessageParam = {
        "role": "tool",
        "tool_call_id": message.tool_call_id,
        "content": message.content,
    }
    return tool


def wire_tool(spec: ToolSpec) -> ChatCompletionFunctionToolParam:
    """A tool offered to the model, as an OpenAI function tool."""
    return {
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": dict(spec.parameters),
        },
    }


def _system(content: str) -> ChatCompletionSystemMessageParam:
    return {"role": "system", "content": content}


def _wire_call(call: ToolCall) -> ChatCompletionMessageFunctionToolCallParam:
    return {
        "id": call.call_id,
        "type": "function",
        "function": {"name": call.name, "arguments": json.dumps(dict(call.arguments))},
    }


# -- the reply ---------------------------------------------------------------------------------


@dataclass
class _CallParts:
    call_id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class _Counts:
    """A call's token counts as the server reports them (``prompt_tokens`` includes the
    cached ones)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None

    def read(self, usage: CompletionUsage) -> None:
        self.input_tokens = usage.prompt_tokens
        self.output_tokens = usage.completion_tokens
        details = usage.prompt_tokens_details
        if details is not None:
            self.cache_read_tokens = details.cached_tokens
            # Reported by some compatible gateways, never by hosted OpenAI (its cache is free
            # to write).
            self.cache_write_tokens = details.cache_write_tokens

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
    """The pieces of a streamed reply, gathered chunk by chunk (only choice 0 is read)."""

    text: list[str] = field(default_factory=list)
    tool_calls: dict[int, _CallParts] = field(default_factory=dict)
    finish_reason: str | None = None
    counts: _Counts = field(default_factory=_Counts)

    def add(self, chunk: ChatCompletionChunk, on_delta: DeltaCallback | None) -> None:
        if chunk.usage is not None:
            self.counts.read(chunk.usage)
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            delta = choice.delta
            piece = delta.content or delta.refusal
            if piece:
                self.text.append(piece)
                if on_delta is not None:
                    on_delta(piece)
            for fragment in delta.tool_calls or ():
                parts = self.tool_calls.setdefault(self._index(fragment), _CallParts())
                if fragment.id and not parts.call_id:
                    parts.call_id = fragment.id
                function = fragment.function
                if function is None:
                    continue
                # The name comes whole in the first fragment; some servers repeat it later.
                if function.name and function.name != parts.name:
                    parts.name += function.name
                if function.arguments:
                    parts.arguments.append(function.arguments)
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason

    def _index(self, fragment: ChoiceDeltaToolCall) -> int:
        # Some servers omit ``index`` when they send each call whole; a new id is a new call.
        index = getattr(fragment, "index", None)
        if isinstance(index, int):
            return index
        fragment_id = fragment.id
        for known, parts in self.tool_calls.items():
            if fragment_id and parts.call_id == fragment_id:
                return known
        if fragment_id or not self.tool_calls:
            return len(self.tool_calls)
        return max(self.tool_calls)


def parse_arguments(raw: str, *, model: str, tool: str) -> dict[str, Any]:
    """A tool call's JSON arguments as an object; a malformed one is a retryable failure.

    A model that wrote broken JSON (or was cut off mid-call) may well write a good call when
    asked again, so this is ``retryable``, not ``permanent``.
    """
    if not raw.strip():
        return {}  # a call to a tool without parameters
    try:
        arguments = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise _malformed(
            model, f"the arguments of tool call {tool!r} are not JSON ({exc})"
        ) from exc
    if not isinstance(arguments, dict):
        raise _malformed(
            model,
            f"the arguments of tool call {tool!r} are a JSON {type(arguments).__name__}, "
            "not an object",
        )
    return arguments


def _new_call_id() -> str:
    # Some local servers send no call id; the result must still be paired with its call.
    return f"call_{uuid.uuid4().hex[:24]}"


# -- failures ----------------------------------------------------------------------------------


def _answered(exc: openai.APIStatusError) -> Answered:
    status = exc.status_code
    kind = status_kind(status, exhausted=exc.code == "insufficient_quota")
    return kind, status, f"{status}: {detail(exc.message)}"


SDK = Sdk(
    provider=_PROVIDER,
    api_error=openai.APIError,
    status_error=openai.APIStatusError,
    connection_error=openai.APIConnectionError,
    timeout_error=openai.APITimeoutError,
    answered=_answered,
)
"""How this SDK's failures are told (the rule is :mod:`tidings.models.failures`')."""


def _malformed(model: str, what: str) -> ModelError:
    return malformed(_PROVIDER, model, what)
