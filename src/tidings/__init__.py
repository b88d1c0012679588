"""tidings: the durable kernel of an LLM-agent runtime.

Every fact the runtime learns on its own reaches the right turn of the right conversation, at
a safe point, once as far as the model is concerned, through any crash.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from tidings.agents import RemoteAgent
from tidings.clock import Clock, ManualClock, SystemClock
from tidings.conversations.catalog import Conversations
from tidings.conversations.questions import Question, QuestionConfig
from tidings.errors import (
    ApprovalDecidedError,
    BacklogFullError,
    CommitOutcomeUnknownError,
    CompactionRefusedError,
    ConfigError,
    ConnectionLostError,
    ConversationClosedError,
    DatabaseBusyError,
    DiskFullError,
    InputQueueFullError,
    InstanceNotRunningError,
    InvalidInputError,
    MasterKeyError,
    ModelError,
    ModelErrorKind,
    OperationSettledError,
    OriginNotAllowedError,
    PairingViolationError,
    PayloadTooLargeError,
    QuestionDecidedError,
    ResultCorruptError,
    RuntimeLockedError,
    SlotLostError,
    StaleLeaseError,
    StoreError,
    TidingsError,
    UnknownApprovalError,
    UnknownConversationError,
    UnknownOperationError,
    UnknownProfileError,
    UnknownQuestionError,
    UnknownResultError,
    UnknownRunError,
    UnknownTaskError,
)
from tidings.mail.door import Door, DoorConfig
from tidings.mcp import MCPOAuth, MCPServer
from tidings.models.base import Model, ModelReply, ModelRequest
from tidings.models.scripted import Rule, ScriptedModel
from tidings.push import PushDeliveryConfig
from tidings.records.instances import Instance
from tidings.records.outbox import Outbox, OutboxConfig, SweepReport
from tidings.records.results import (
    Lifetime,
    MasterKey,
    ResultPage,
    ResultRef,
    Results,
    ResultsConfig,
)
from tidings.runtime.root import Runtime, RuntimeConfig
from tidings.scheduler.coordinator import Coordinator, CoordinatorConfig
from tidings.settings import MCPServerSpec, Settings, load_settings
from tidings.settings import open as open
from tidings.store import SqliteStore, Store, Tx, open_store
from tidings.tools.registry import Tool, ToolContext, ToolOutput, ToolRegistry
from tidings.tools.typed import tool
from tidings.turns.runner import TurnConfig
from tidings.types import (
    Answer,
    Author,
    AuthorKind,
    Conversation,
    ConversationStatus,
    DeadLetter,
    Delivery,
    DeliveryMode,
    DeliveryState,
    Event,
    FeedEvent,
    GoalStatus,
    Input,
    InputState,
    Lease,
    Message,
    Operation,
    OperationState,
    Origin,
    Profile,
    Published,
    QueueStats,
    ReconcileReport,
    Run,
    RunStatus,
    Signal,
    StartKind,
    Usage,
)

__version__ = "0.1.0"

# ``async with tidings.open(database_url, models=[...]) as runtime:`` -- the composition root:
# open the database (migrating it), boot a runtime with a new instance id, reconcile earlier
# instances, and shut down gracefully on exit (see :meth:`Runtime.open`);
# ``tidings.open(config="tidings.toml")`` takes the models, profiles and tools of a config file.

if TYPE_CHECKING:  # at run time, imported on first use (see __getattr__)
    from tidings.client import Client as Client
    from tidings.models.anthropic import AnthropicModel as AnthropicModel
    from tidings.models.openai import OpenAIChatModel as OpenAIChatModel
    from tidings.store.postgres import PostgresStore as PostgresStore

_ADAPTERS = {"OpenAIChatModel": ("openai", "openai"), "AnthropicModel": ("anthropic", "anthropic")}


def __getattr__(name: str) -> object:
    """The SDK adapters, imported when first named: the base install needs neither SDK; the
    HTTP client, which brings in the service's schemas; and PostgreSQL's store, which brings in
    psycopg (a third of a second of every start, the command line's too, that SQLite never
    needs)."""
    if name == "Client":
        from tidings.client import Client

        return Client
    if name == "PostgresStore":
        from tidings.store.postgres import PostgresStore

        return PostgresStore
    if name in _ADAPTERS:
        extra, module = _ADAPTERS[name]
        try:
            imported = importlib.import_module(f"tidings.models.{module}")
        except ImportError as exc:
            raise ImportError(
                f"tidings.{name} needs its SDK: pip install 'tidings[{extra}]'") from exc
        return getattr(imported, name)
    raise AttributeError(f"module 'tidings' has no attribute {name!r}")


__all__ = (
    "Answer",
    "ApprovalDecidedError",
    "Author",
    "AuthorKind",
    "BacklogFullError",
    "Client",
    "Clock",
    "CommitOutcomeUnknownError",
    "CompactionRefusedError",
    "ConfigError",
    "ConnectionLostError",
    "Conversation",
    "ConversationClosedError",
    "ConversationStatus",
    "Conversations",
    "Coordinator",
    "CoordinatorConfig",
    "DatabaseBusyError",
    "DeadLetter",
    "Delivery",
    "DeliveryMode",
    "DeliveryState",
    "DiskFullError",
    "Door",
    "DoorConfig",
    "Event",
    "FeedEvent",
    "GoalStatus",
    "Input",
    "InputQueueFullError",
    "InputState",
    "Instance",
    "InstanceNotRunningError",
    "InvalidInputError",
    "Lease",
    "Lifetime",
    "MCPOAuth",
    "MCPServer",
    "MCPServerSpec",
    "ManualClock",
    "MasterKey",
    "MasterKeyError",
    "Message",
    "Model",
    "ModelError",
    "ModelErrorKind",
    "ModelReply",
    "ModelRequest",
    "Operation",
    "OperationSettledError",
    "OperationState",
    "Origin",
    "OriginNotAllowedError",
    "Outbox",
    "OutboxConfig",
    "PairingViolationError",
    "PayloadTooLargeError",
    "PostgresStore",
    "Profile",
    "Published",
    "PushDeliveryConfig",
    "Question",
    "QuestionConfig",
    "QuestionDecidedError",
    "QueueStats",
    "ReconcileReport",
    "RemoteAgent",
    "ResultCorruptError",
    "ResultPage",
    "ResultRef",
    "Results",
    "ResultsConfig",
    "Rule",
    "Run",
    "RunStatus",
    "Runtime",
    "RuntimeConfig",
    "RuntimeLockedError",
    "ScriptedModel",
    "Settings",
    "Signal",
    "SlotLostError",
    "SqliteStore",
    "StaleLeaseError",
    "StartKind",
    "Store",
    "StoreError",
    "SweepReport",
    "SystemClock",
    "TidingsError",
    "Tool",
    "ToolContext",
    "ToolOutput",
    "ToolRegistry",
    "TurnConfig",
    "Tx",
    "UnknownApprovalError",
    "UnknownConversationError",
    "UnknownOperationError",
    "UnknownProfileError",
    "UnknownQuestionError",
    "UnknownResultError",
    "UnknownRunError",
    "UnknownTaskError",
    "Usage",
    "__version__",
    "load_settings",
    "open",
    "open_store",
    "tool",
)
