"""Runs: the durable record of one turn, why it started, its status, what its model calls
spent, and what became of an input its poster waited for."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from tidings.types.ids import ConversationId, RunId
from tidings.types.inputs import Input, InputState


class RunStatus(enum.StrEnum):
    """A run's status; every status but queued, running and awaiting_approval is final.
    ``awaiting_approval``: a running run holding on a tool call a person has not decided yet;
    once every such call is decided (or expired) it is ``running`` again."""

    QUEUED = "queued"
    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting_approval"
    COMPLETED = "completed"
    FAILED = "failed"
    NEEDS_ATTENTION = "needs_attention"
    STOPPED = "stopped"

    @property
    def ended(self) -> bool:
        """Whether the run is over (a final status)."""
        return self not in (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.AWAITING_APPROVAL)


class StartKind(enum.StrEnum):
    """Why the coordinator was asked to start a turn (C2). Only ``person`` is not automatic."""

    PERSON = "person"
    AGENT = "agent"
    MAIL = "mail"
    WAKE = "wake"
    GOAL = "goal"

    @property
    def automatic(self) -> bool:
        return self in (StartKind.WAKE, StartKind.GOAL)


@dataclass(frozen=True, slots=True)
class Usage:
    """What model calls spent, summed: calls made and tokens, as the providers reported them.

    ``input_tokens`` counts every prompt token, cached ones included; ``cache_read_tokens`` and
    ``cache_write_tokens`` are the parts of it the provider read from, or wrote to, its prompt
    cache. A count a provider does not report adds nothing. ``model_calls`` counts every call
    made, answered or failed; a failed call adds the tokens its provider reported before it
    failed, if any.
    """

    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            model_calls=self.model_calls + other.model_calls,
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
        )

    def tokens(self) -> dict[str, int]:
        """The token counts by kind: ``input``, ``output``, ``cache_read``, ``cache_write``."""
        return {
            "input": self.input_tokens,
            "output": self.output_tokens,
            "cache_read": self.cache_read_tokens,
            "cache_write": self.cache_write_tokens,
        }


@dataclass(frozen=True, slots=True)
class Run:
    """The durable record of one turn."""

    run_id: RunId
    conversation_id: ConversationId
    trigger: StartKind
    status: RunStatus
    model: str | None
    failure_code: str | None
    steps: int
    created_at_us: int
    started_at_us: int | None
    ended_at_us: int | None
    usage: Usage = Usage()
    """What the run's model calls spent, written with its end (zero while it runs, and for a
    run whose process died before its end)."""
    model_failures: tuple[dict[str, Any], ...] = ()
    """Each model a run that exhausted them asked, and why it failed (``model``, ``reason``...)."""


@dataclass(frozen=True, slots=True)
class Answer:
    """What became of a posted input, when its poster waited for it (``post(..., wait=True)``).

    ``run`` is the run that read the input (the turn it started, or joined as a steer), or --
    while no run has written it yet -- the running turn that took it; None while the input
    waits in the queue, or once it was cancelled unread. ``reply`` is that run's final
    assistant text (None while it has none: running, awaiting approval, failed...).
    ``timed_out`` says the wait ended first (its timeout, or a shutdown): the answer is the
    input and its run as they stood then, and the input stays accepted.
    """

    input: Input
    run: Run | None
    reply: str | None
    timed_out: bool

    @property
    def status(self) -> RunStatus | InputState:
        """The run's status; without a run, the input's state (``queued`` or ``cancelled``)."""
        return self.run.status if self.run is not None else self.input.state
