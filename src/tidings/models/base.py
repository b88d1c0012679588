"""The model protocol: what a turn sends to a model, what comes back, and how failures are told.

A request has three parts, in this order (S12): a stable, cacheable prefix (``system`` and
``tools``), the history window (``messages``), and a dynamic ``suffix`` of runtime facts. An
adapter must keep that order on the wire and must never turn a suffix block into a user
message: runtime facts are observations, not a person's words.

Every failure an adapter can see is raised as :class:`ModelError` with one of three kinds
(A4): ``retryable`` (try the same model again after a pause: rate limits, timeouts, 5xx),
``unavailable`` (this model cannot answer now: go to the next one in the fallback list) and
``permanent`` (the request itself is wrong: no other attempt will help). The SDK adapters share
one classifier, :mod:`tidings.models.failures`: a model that cannot be reached at all (refused,
unresolvable, the connect timed out) is ``unavailable``; an exchange that broke after the
request went out (a reset, a read timeout, a cut stream) is ``retryable``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

# The protocol's errors live in tidings.errors; re-exported (``as``) for callers of this module.
from tidings.errors import ModelError as ModelError
from tidings.errors import ModelErrorKind as ModelErrorKind
from tidings.types import ToolCall as ToolCall


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool offered to the model: its name, what it does, a JSON schema of its arguments."""

    name: str
    description: str
    parameters: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )


@dataclass(frozen=True, slots=True)
class PromptMessage:
    """One history message as the model sees it.

    ``role`` is ``user`` (a person's or agent's words, or an internal notice the kernel wrote),
    ``assistant`` (text and/or ``tool_calls``) or ``tool`` (the result of ``tool_call_id``).
    ``origin`` and ``meta`` are the runtime's own annotations; adapters do not send them, the
    scripted model matches on them.
    """

    role: Literal["user", "assistant", "tool"]
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    tool_name: str | None = None
    origin: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """Everything one model call needs; ``model`` is the name the provider knows."""

    model: str
    system: str
    tools: tuple[ToolSpec, ...]
    messages: tuple[PromptMessage, ...]
    suffix: tuple[str, ...] = ()
    max_output_tokens: int = 4096


@dataclass(frozen=True, slots=True)
class ModelReply:
    """The model's answer: text and/or tool calls. No tool calls means the turn is answered."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    model: str = ""
    stop_reason: str | None = None
    input_tokens: int | None = None
    """Every prompt token of the call, cached ones included (None: not reported)."""
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    """The part of ``input_tokens`` read from the provider's prompt cache."""
    cache_write_tokens: int | None = None
    """The part of ``input_tokens`` written to the provider's prompt cache."""


class TokenCounts(Protocol):
    """What a call reported spending, as a reply (or a failed call's error) carries it."""

    @property
    def input_tokens(self) -> int | None: ...

    @property
    def output_tokens(self) -> int | None: ...

    @property
    def cache_read_tokens(self) -> int | None: ...

    @property
    def cache_write_tokens(self) -> int | None: ...


def spent(error: ModelError, counts: TokenCounts) -> ModelError:
    """``error``, carrying the tokens ``counts`` says the failed call spent; returns it."""
    error.input_tokens = counts.input_tokens
    error.output_tokens = counts.output_tokens
    error.cache_read_tokens = counts.cache_read_tokens
    error.cache_write_tokens = counts.cache_write_tokens
    return error


DeltaCallback = Callable[[str], None]
"""Called with each piece of streamed text as it arrives (a hint for live views only)."""


@runtime_checkable
class Model(Protocol):
    """A model client. One instance answers for one model name.

    ``complete`` may stream; it returns only once the whole reply is in. A provider's "done"
    chunk is not an acknowledgment of anything: the turn commits after ``complete`` returns.

    A model may also declare ``context_chars`` (an int): how large a request it takes, in
    characters. A turn sends the newest history that fits; a retry whose history does not fit
    is held with ``history_exceeds_fit`` instead (M11).
    """

    name: str

    async def complete(
        self, request: ModelRequest, *, on_delta: DeltaCallback | None = None
    ) -> ModelReply: ...
