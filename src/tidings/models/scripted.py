"""A deterministic model for tests, benchmarks and the offline demo (A4).

Rules are tried in order against the newest message of the request; the first that matches
answers. A rule matches on any combination of: the newest message's text (``text_equals``,
``text_contains``, ``text_matches`` -- a regular expression), its ``role``, its ``origin``,
its ``meta_kind`` (``meta.kind``), the tool whose result it is (``tool_result``), and text in
the dynamic suffix (``suffix_contains``, to answer runtime facts). A reply holds ``text``
and/or ``tool_calls``, or ``echo`` (repeat the newest text), or ``error`` (a failure of the
given kind), and may wait ``delay_seconds`` first (a slow or hanging model).

A reply's text is streamed to ``on_delta``: whole, or as ``chunks`` pieces of nearly equal
length with ``chunk_delay`` seconds between them (an answer that takes a while to write).
A reply with both ``text`` and ``error`` streams its text and then fails (a model that breaks
off mid-answer).

Rules load from JSON, so the command line and the HTTP service can use them (docs/models.md
describes every condition and reply key)::

    {"name": "scripted",
     "rules": [{"when": {"text_contains": "sleep"},
                "reply": {"tool_calls": [{"name": "shell", "arguments": {"command": "sleep 1"}}]}},
               {"when": {"tool_result": "shell"}, "reply": {"text": "It finished."}}],
     "default": {"echo": true}}

Tool call ids are derived from the request (its message count and the call's index), so the
same conversation gives the same ids on every run.

Every reply reports usage by a simple estimate, the same on every run: one token for every
four characters, rounded up (:func:`estimate_tokens`). Input counts the system prompt, the
tools offered (name, description, JSON schema), the history's text and tool calls and the
dynamic suffix; output counts the reply's text and tool calls. No cache tokens are reported. A
reply's ``usage`` sets counts of its own instead (``input_tokens``, ``output_tokens``,
``cache_read_tokens``, ``cache_write_tokens``); with ``error`` they are what the failed call
spent.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tidings.errors import InvalidInputError
from tidings.models.base import (
    DeltaCallback,
    ModelError,
    ModelErrorKind,
    ModelReply,
    ModelRequest,
    PromptMessage,
    ToolCall,
)

_WHEN_KEYS = frozenset(
    {
        "text_equals",
        "text_contains",
        "text_matches",
        "role",
        "origin",
        "meta_kind",
        "tool_result",
        "suffix_contains",
    }
)
_REPLY_KEYS = frozenset(
    {"text", "tool_calls", "echo", "error", "delay_seconds", "usage", "chunks", "chunk_delay"}
)
_USAGE_KEYS = frozenset(
    {"input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"}
)


@dataclass(frozen=True, slots=True)
class Rule:
    """``when`` every condition holds for the newest message, answer with ``reply``."""

    when: Mapping[str, Any]
    reply: Mapping[str, Any]

    def matches(self, newest: PromptMessage | None, suffix: Sequence[str]) -> bool:
        w = self.when
        text = newest.content if newest is not None else ""
        checks: list[bool] = []
        if "text_equals" in w:
            checks.append(text == w["text_equals"])
        if "text_contains" in w:
            checks.append(str(w["text_contains"]) in text)
        if "text_matches" in w:
            checks.append(re.search(str(w["text_matches"]), text) is not None)
        if "role" in w:
            checks.append(newest is not None and newest.role == w["role"])
        if "origin" in w:
            checks.append(newest is not None and newest.origin == w["origin"])
        if "meta_kind" in w:
            checks.append(newest is not None and newest.meta.get("kind") == w["meta_kind"])
        if "tool_result" in w:
            checks.append(
                newest is not None
                and newest.role == "tool"
                and newest.tool_name == w["tool_result"]
            )
        if "suffix_contains" in w:
            checks.append(any(str(w["suffix_contains"]) in block for block in suffix))
        return all(checks)


def _check_reply(reply: Mapping[str, Any], where: str) -> None:
    unknown = set(reply) - _REPLY_KEYS
    if unknown:
        raise InvalidInputError(f"{where}: unknown reply keys {sorted(unknown)}")
    if "error" in reply:
        ModelErrorKind(reply["error"])
    chunks = reply.get("chunks", 1)
    if not isinstance(chunks, int) or isinstance(chunks, bool) or chunks < 1:
        raise InvalidInputError(f"{where}: chunks must be a positive integer")
    if float(reply.get("chunk_delay", 0)) < 0:
        raise InvalidInputError(f"{where}: chunk_delay must not be negative")
    for call in reply.get("tool_calls", ()):
        if not isinstance(call, Mapping) or not isinstance(call.get("name"), str):
            raise InvalidInputError(f"{where}: every tool call needs a name")
    usage = reply.get("usage", {})
    if not isinstance(usage, Mapping) or set(usage) - _USAGE_KEYS:
        raise InvalidInputError(f"{where}: usage holds only {sorted(_USAGE_KEYS)}")
    if any(type(v) is not int or v < 0 for v in usage.values()):
        raise InvalidInputError(f"{where}: usage counts are integers from 0")


def estimate_tokens(text: str) -> int:
    """The scripted model's token estimate: one for every four characters, rounded up."""
    return _tokens(len(text))


def _tokens(chars: int) -> int:
    return -(-chars // 4)


def _calls_text(calls: Sequence[ToolCall]) -> str:
    return "".join(
        c.name + json.dumps(dict(c.arguments), sort_keys=True, default=str) for c in calls
    )


def _request_chars(request: ModelRequest) -> int:
    """The length of the request written out as text (system, tools, history, suffix),
    counted without writing it out: a long history is counted on every call."""
    chars = len(request.system) + sum(len(block) for block in request.suffix)
    for t in request.tools:
        chars += len(t.name) + len(t.description) + len(
            json.dumps(dict(t.parameters), sort_keys=True, default=str))
    for m in request.messages:
        chars += len(m.content)
        if m.tool_calls:
            chars += len(_calls_text(m.tool_calls))
    return chars


@dataclass
class ScriptedModel:
    """A model that answers by rules; see the module docstring for their shape."""

    rules: Sequence[Rule] = ()
    default: Mapping[str, Any] = field(default_factory=lambda: {"echo": True})
    name: str = "scripted"
    calls: int = 0
    context_chars: int | None = None
    """How large a request this model takes, in characters (None: no bound)."""

    def __post_init__(self) -> None:
        for index, rule in enumerate(self.rules):
            unknown = set(rule.when) - _WHEN_KEYS
            if unknown:
                raise InvalidInputError(f"rule {index}: unknown conditions {sorted(unknown)}")
            _check_reply(rule.reply, f"rule {index}")
        _check_reply(self.default, "default")

    @classmethod
    def from_json(cls, source: str | Mapping[str, Any] | Path) -> ScriptedModel:
        """Rules from a JSON document, a JSON file, or an already parsed mapping."""
        if isinstance(source, Path):
            source = source.read_text("utf-8")
        try:
            data = json.loads(source) if isinstance(source, str) else dict(source)
        except json.JSONDecodeError as exc:
            raise InvalidInputError(f"scripted model rules are not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise InvalidInputError("scripted model rules must be a JSON object")
        try:
            rules = [Rule(dict(r["when"]), dict(r["reply"])) for r in data.get("rules", [])]
        except (KeyError, TypeError):
            raise InvalidInputError("every rule needs a 'when' and a 'reply' object") from None
        return cls(
            rules=rules,
            default=dict(data.get("default", {"echo": True})),
            name=str(data.get("name", "scripted")),
        )

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
    ) -> ModelReply:
        self.calls += 1
        newest = request.messages[-1] if request.messages else None
        reply = next(
            (r.reply for r in self.rules if r.matches(newest, request.suffix)), self.default
        )
        delay = float(reply.get("delay_seconds", 0))
        if delay > 0:
            await asyncio.sleep(delay)
        usage: Mapping[str, int] = reply.get("usage", {})
        text = str(reply.get("text", ""))
        if reply.get("echo"):
            text = newest.content if newest is not None else ""
        if "error" in reply:
            if "text" in reply:
                await _stream(text, reply, on_delta)  # broken off mid-answer
            error = ModelError(
                ModelErrorKind(reply["error"]),
                f"scripted {reply['error']} failure",
                model=self.name,
            )
            error.input_tokens = usage.get("input_tokens")
            error.output_tokens = usage.get("output_tokens")
            error.cache_read_tokens = usage.get("cache_read_tokens")
            error.cache_write_tokens = usage.get("cache_write_tokens")
            raise error
        base = len(request.messages)
        calls = tuple(
            ToolCall(f"call_{base}_{i}", str(c["name"]), dict(c.get("arguments", {})))
            for i, c in enumerate(reply.get("tool_calls", ()))
        )
        await _stream(text, reply, on_delta)
        return ModelReply(
            text=text,
            tool_calls=calls,
            model=request.model,
            stop_reason="tool_use" if calls else "end_turn",
            input_tokens=usage.get("input_tokens", _tokens(_request_chars(request))),
            output_tokens=usage.get("output_tokens", estimate_tokens(text + _calls_text(calls))),
            cache_read_tokens=usage.get("cache_read_tokens"),
            cache_write_tokens=usage.get("cache_write_tokens"),
        )


def chunked(text: str, chunks: int) -> list[str]:
    """``text`` cut into at most ``chunks`` pieces of nearly equal length, in order."""
    if not text:
        return []
    count = max(1, min(chunks, len(text)))
    size, extra = divmod(len(text), count)
    pieces: list[str] = []
    start = 0
    for index in range(count):
        end = start + size + (1 if index < extra else 0)
        pieces.append(text[start:end])
        start = end
    return pieces


async def _stream(text: str, reply: Mapping[str, Any], on_delta: DeltaCallback | None) -> None:
    """Hand ``text`` to ``on_delta`` as the rule says: whole, or in chunks with a pause (the
    pauses are taken with or without a listener, so a reply takes as long either way)."""
    pause = float(reply.get("chunk_delay", 0))
    for index, piece in enumerate(chunked(text, int(reply.get("chunks", 1)))):
        if index and pause > 0:
            await asyncio.sleep(pause)
        if on_delta is not None:
            on_delta(piece)
