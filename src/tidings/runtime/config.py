"""The runtime's configuration: every component's, in one place."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from tidings.agents import RemoteAgent
from tidings.conversations.approvals import ApprovalConfig
from tidings.conversations.questions import QuestionConfig
from tidings.mail.door import DoorConfig
from tidings.mcp import MCPServer
from tidings.push import PushDeliveryConfig
from tidings.records.outbox import OutboxConfig
from tidings.records.results import ResultsConfig
from tidings.scheduler.coordinator import CoordinatorConfig
from tidings.support.tracing import TracerSource
from tidings.turns.plan import TurnConfig


@dataclass(frozen=True, slots=True)
class RuntimeConfig:
    """Every component's configuration in one place."""

    outbox: OutboxConfig = field(default_factory=OutboxConfig)
    turns: TurnConfig = field(default_factory=TurnConfig)
    coordinator: CoordinatorConfig = field(default_factory=CoordinatorConfig)
    door: DoorConfig = field(default_factory=DoorConfig)
    results: ResultsConfig = field(default_factory=ResultsConfig)
    results_sweep_interval: timedelta = timedelta(minutes=1)
    approvals: ApprovalConfig = field(default_factory=ApprovalConfig)
    questions: QuestionConfig = field(default_factory=QuestionConfig)
    relay_kick: bool = True
    """Relay a child's reply as soon as the turn that wrote it commits. False leaves every
    reply to the relay sweep (and waits for a reply notice it by polling)."""
    feed_poll: timedelta = timedelta(seconds=1)
    """How often the feed looks at its watched conversations' journals by itself: a hint that
    was lost costs at most this long (and commits of other SQLite processes arrive so)."""
    relay_sweep: timedelta | None = timedelta(minutes=1)
    """How often the relay sweep looks for replies not yet relayed (a lost kick, a full parent
    queue, a crash). None: only the pass at start runs on its own."""
    tracer_provider: TracerSource | None = None
    """The OpenTelemetry ``TracerProvider`` tidings' spans come from; None: the global one.
    Without the ``otel`` extra there are no spans either way."""
    answer_poll: timedelta = timedelta(milliseconds=500)
    """How often a wait for an input's answer looks again by itself: what this process commits
    wakes it at once, what another process of a cluster commits is seen at the next look."""
    mcp_servers: tuple[MCPServer, ...] = ()
    """MCP servers whose tools this runtime offers (with those ``Runtime.open`` is given)."""
    agents: tuple[RemoteAgent, ...] = ()
    """Remote A2A agents a ``spawn`` may delegate to (with those ``Runtime.open`` is given)."""
    push: PushDeliveryConfig = field(default_factory=PushDeliveryConfig)
    """A2A push notifications: attempts, backoff, timeouts, and whether webhooks may target
    private addresses (P3)."""


__all__ = ("RuntimeConfig",)
