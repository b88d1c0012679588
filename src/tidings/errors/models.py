"""Models: a model could not answer, and how the turn runner handles it; a tool's request for a
completion that no model of the conversation answered."""

from __future__ import annotations

import enum

from tidings.errors.base import TidingsError


class ModelErrorKind(enum.StrEnum):
    """How a model failure is handled by the turn runner.

    ``retryable``: ask the same model again after a backoff pause. ``unavailable``: this model
    cannot answer now; go to the next model of the fallback list. ``permanent``: the request
    itself is wrong; no other attempt will help, and the run fails.
    """

    RETRYABLE = "retryable"
    UNAVAILABLE = "unavailable"
    PERMANENT = "permanent"


class ModelError(TidingsError):
    """The model could not answer.

    A call can fail after the provider counted tokens (a stream cut after its start, a reply
    that came whole but could not be read): the adapter then sets the counts it saw, named as
    on a reply, and the run adds them to its usage. None means none was reported.
    """

    code = "model_error"

    def __init__(
        self,
        kind: ModelErrorKind,
        message: str,
        *,
        model: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = ModelErrorKind(kind)
        self.model = model
        self.status = status
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.cache_read_tokens: int | None = None
        self.cache_write_tokens: int | None = None

    @property
    def failure_code(self) -> str:
        """A non-sensitive code for runs and dead letters (``model_retryable`` and so on)."""
        return f"model_{self.kind.value}"


class ModelSampleError(TidingsError):
    """A tool asked the conversation's models for a completion (an MCP server's sampling) and
    none of them answered; the run goes on."""

    code = "sample_failed"

    def __init__(self, reason: str) -> None:
        super().__init__(f"no model of the conversation answered: {reason}")
        self.reason = reason
