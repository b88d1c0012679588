"""What a turn is given and what it reports: its bounds, its plan, its progress, its outcome.

Plain data shared by the coordinator (which makes a plan in the unit that takes the slot) and
the turn runner (which carries it out).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from tidings.feed import Draft
from tidings.models.base import ToolCall
from tidings.support.tracing import NO_SPAN, Span
from tidings.tools.registry import TaskStarter
from tidings.types import (
    ConversationId,
    Input,
    Lease,
    Message,
    Profile,
    Run,
    RunId,
    RunStatus,
    StartKind,
    Usage,
)


@dataclass(frozen=True, slots=True)
class TurnConfig:
    """Bounds of one turn; durations carry their unit."""

    history_messages: int = 200
    inputs_per_turn: int = 64
    max_steps: int = 32
    model_attempts: int = 3
    retry_base: timedelta = timedelta(milliseconds=500)
    retry_cap: timedelta = timedelta(seconds=8)
    model_timeout: timedelta = timedelta(seconds=120)
    model_cooldown_base: timedelta = timedelta(seconds=5)
    """A model found unavailable is skipped this long (jittered, doubling each time it is found
    unavailable again, up to ``model_cooldown_cap``) before it is asked again (B9)."""
    model_cooldown_cap: timedelta = timedelta(minutes=5)
    slot_ttl: timedelta = timedelta(seconds=30)
    task_drain: timedelta = timedelta(minutes=10)
    history_budget_chars: int | None = None
    """An explicit bound on a request's size, in characters (system, history, inputs). None:
    the leading model's own ``context_chars``, if it declares one; else no bound."""
    """How long a reply waits for its turn-lifetime tasks before it is final (M4)."""


class TurnTasks(TaskStarter, Protocol):
    """What a turn needs of the background tasks it started (and its tools start)."""

    async def wait_journalled(self, task_keys: Sequence[str], within: float) -> bool: ...

    def kill(self, task_keys: Sequence[str]) -> None: ...


class TurnChildren(Protocol):
    """What a turn needs of the child conversations it delegated to (M16)."""

    async def await_replies(self, request_ids: Sequence[str], within: float) -> bool: ...


@dataclass(frozen=True, slots=True)
class TurnPlan:
    """What the slot-taking unit decided: the run and everything it reads."""

    conversation_id: ConversationId
    run_id: RunId
    trigger: StartKind
    slot_token: str
    profile: Profile
    inputs: tuple[Input, ...]
    started_at_us: int
    history_start_seq: int
    last_message_seq: int
    lease: Lease | None
    notice: str | None = None
    notice_meta: Mapping[str, Any] = field(default_factory=dict)
    appended: tuple[Message, ...] = ()
    """Messages the slot-taking unit wrote itself (a notification): the history cache takes
    them without reading them back."""


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    """The committed run, and whether work was waiting when its slot was released."""

    run: Run
    more_work: bool
    settled_ns: int | None = None
    """When nothing waited as the slot was released: the monotonic time (``time.monotonic_ns``)
    at which the last unit began, before it read under the lock that nothing would start --
    a settle begun before then needs no read of its own (None: not known settled)."""


class TurnFailed(Exception):
    def __init__(self, status: RunStatus, code: str, errors: Sequence[dict[str, Any]]) -> None:
        super().__init__(code)
        self.status = status
        self.code = code
        self.errors = list(errors)


@dataclass
class TurnProgress:
    """What the turn has committed so far (the failure path finishes from here)."""

    pending: list[Input]
    steps: int = 0
    model: str | None = None
    open_calls: list[ToolCall] = field(default_factory=list)
    taken: set[str] = field(default_factory=set)
    notice_written: bool = False
    more_work: bool = False
    settled_ns: int | None = None
    """Set by the unit that ends the turn: when it began (see :attr:`TurnOutcome.settled_ns`);
    kept only when ``more_work`` is false."""
    released: Callable[[], None] | None = None
    """Called once the unit that gave the slot back committed, before any caller or watcher
    that commit wakes runs (on the thread that committed it)."""
    for_a_person: Callable[[], AbstractAsyncContextManager[None]] | None = None
    """A block in which the turn waits for a person's decision: its place among the turns
    the process runs at once is lent meanwhile (the coordinator's; none: nothing is lent)."""
    turn_tasks: list[str] = field(default_factory=list)
    """Turn-lifetime tasks started by this turn, not yet drained."""
    trimmed: dict[str, int] | None = None
    """The history sent was the newest window of a longer one (M11): journalled once."""
    trim_recorded: bool = False
    child_replied: bool = False
    """This turn answered a request a parent opened (the relay is kicked after the commit)."""
    turn_children: list[str] = field(default_factory=list)
    """Turn-owned child requests whose first report this turn has not consumed yet (M16)."""
    delegated: bool = False
    """The turn opened turn-owned requests: what it leaves unconsumed becomes mail at its end."""
    drained: list[str] = field(default_factory=list)
    """Turn-lifetime tasks drained once (still running then): handed off as the turn ends."""
    span: Span = NO_SPAN
    """The turn's span: the parent of its model calls (none for a compaction's)."""
    usage: Usage = field(default_factory=Usage)
    """What the turn's model calls spent so far, answered or failed (written with its end)."""
    draft: Draft | None = None
    """The answer of the step being asked or committed, as streamed to watchers: set
    while the model writes it and until it commits (then None) or is discarded."""

    def outcome(self, run: Run) -> TurnOutcome:
        """The committed ``run``, with what its last unit read of the work waiting."""
        return TurnOutcome(run, self.more_work, None if self.more_work else self.settled_ns)


__all__ = ("TurnChildren", "TurnConfig", "TurnOutcome", "TurnPlan", "TurnTasks")
