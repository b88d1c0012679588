"""tidings: the durable kernel of an LLM-agent runtime.

Every fact the runtime learns on its own reaches the right turn of the right conversation, at
a safe point, once as far as the model is concerned, through any crash.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from tidings.clock import Clock, ManualClock, SystemClock
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
    from tidings.agents import RemoteAgent as RemoteAgent
    from tidings.client import Client as Client
    from tidings.conversations.catalog import Conversations as Conversations
    from tidings.conversations.questions import Question as Question
    from tidings.conversations.questions import QuestionConfig as QuestionConfig
    from tidings.mail.door import Door as Door
    from tidings.mail.door import DoorConfig as DoorConfig
    from tidings.mcp import MCPOAuth as MCPOAuth
    from tidings.mcp import MCPServer as MCPServer
    from tidings.models.anthropic import AnthropicModel as AnthropicModel
    from tidings.models.base import Model as Model
    from tidings.models.base import ModelReply as ModelReply
    from tidings.models.base import ModelRequest as ModelRequest
    from tidings.models.openai import OpenAIChatModel as OpenAIChatModel
    from tidings.models.scripted import Rule as Rule
    from tidings.models.scripted import ScriptedModel as ScriptedModel
    from tidings.push import PushDeliveryConfig as PushDeliveryConfig
    from tidings.records.instances import Instance as Instance
    from tidings.records.outbox import Outbox as Outbox
    from tidings.records.outbox import OutboxConfig as OutboxConfig
    from tidings.records.outbox import SweepReport as SweepReport
    from tidings.records.results import Lifetime as Lifetime
    from tidings.records.results import MasterKey as MasterKey
    from tidings.records.results import ResultPage as ResultPage
    from tidings.records.results import ResultRef as ResultRef
    from tidings.records.results import Results as Results
    from tidings.records.results import ResultsConfig as ResultsConfig
    from tidings.runtime.root import Runtime as Runtime
    from tidings.runtime.root import RuntimeConfig as RuntimeConfig
    from tidings.scheduler.coordinator import Coordinator as Coordinator
    from tidings.scheduler.coordinator import CoordinatorConfig as CoordinatorConfig
    from tidings.settings import MCPServerSpec as MCPServerSpec
    from tidings.settings import Settings as Settings
    from tidings.settings import load_settings as load_settings
    from tidings.settings import open as open
    from tidings.store import SqliteStore as SqliteStore
    from tidings.store import Store as Store
    from tidings.store import Tx as Tx
    from tidings.store import open_store as open_store
    from tidings.store.postgres import PostgresStore as PostgresStore
    from tidings.tools.registry import Tool as Tool
    from tidings.tools.registry import ToolContext as ToolContext
    from tidings.tools.registry import ToolOutput as ToolOutput
    from tidings.tools.registry import ToolRegistry as ToolRegistry
    from tidings.tools.typed import tool as tool
    from tidings.turns.runner import TurnConfig as TurnConfig

_LAZY: dict[str, tuple[str, str]] = {
    "Client": ("tidings.client", "Client"),
    "PostgresStore": ("tidings.store.postgres", "PostgresStore"),
    "Conversations": ("tidings.conversations.catalog", "Conversations"),
    "Coordinator": ("tidings.scheduler.coordinator", "Coordinator"),
    "CoordinatorConfig": ("tidings.scheduler.coordinator", "CoordinatorConfig"),
    "Door": ("tidings.mail.door", "Door"),
    "DoorConfig": ("tidings.mail.door", "DoorConfig"),
    "Instance": ("tidings.records.instances", "Instance"),
    "Lifetime": ("tidings.records.results", "Lifetime"),
    "MCPOAuth": ("tidings.mcp", "MCPOAuth"),
    "MCPServer": ("tidings.mcp", "MCPServer"),
    "MCPServerSpec": ("tidings.settings", "MCPServerSpec"),
    "MasterKey": ("tidings.records.results", "MasterKey"),
    "Model": ("tidings.models.base", "Model"),
    "ModelReply": ("tidings.models.base", "ModelReply"),
    "ModelRequest": ("tidings.models.base", "ModelRequest"),
    "Outbox": ("tidings.records.outbox", "Outbox"),
    "OutboxConfig": ("tidings.records.outbox", "OutboxConfig"),
    "PushDeliveryConfig": ("tidings.push", "PushDeliveryConfig"),
    "Question": ("tidings.conversations.questions", "Question"),
    "QuestionConfig": ("tidings.conversations.questions", "QuestionConfig"),
    "RemoteAgent": ("tidings.agents", "RemoteAgent"),
    "ResultPage": ("tidings.records.results", "ResultPage"),
    "ResultRef": ("tidings.records.results", "ResultRef"),
    "Results": ("tidings.records.results", "Results"),
    "ResultsConfig": ("tidings.records.results", "ResultsConfig"),
    "Rule": ("tidings.models.scripted", "Rule"),
    "Runtime": ("tidings.runtime.root", "Runtime"),
    "RuntimeConfig": ("tidings.runtime.root", "RuntimeConfig"),
    "ScriptedModel": ("tidings.models.scripted", "ScriptedModel"),
    "Settings": ("tidings.settings", "Settings"),
    "SqliteStore": ("tidings.store", "SqliteStore"),
    "Store": ("tidings.store", "Store"),
    "SweepReport": ("tidings.records.outbox", "SweepReport"),
    "Tool": ("tidings.tools.registry", "Tool"),
    "ToolContext": ("tidings.tools.registry", "ToolContext"),
    "ToolOutput": ("tidings.tools.registry", "ToolOutput"),
    "ToolRegistry": ("tidings.tools.registry", "ToolRegistry"),
    "TurnConfig": ("tidings.turns.runner", "TurnConfig"),
    "Tx": ("tidings.store", "Tx"),
    "load_settings": ("tidings.settings", "load_settings"),
    "open": ("tidings.settings", "open"),
    "open_store": ("tidings.store", "open_store"),
    "tool": ("tidings.tools.typed", "tool"),
}
"""What the root re-exports, by the module it is imported from when first named."""

_ADAPTERS = {"OpenAIChatModel": ("openai", "openai"), "AnthropicModel": ("anthropic", "anthropic")}


def __getattr__(name: str) -> object:
    """What the root re-exports beyond the vocabulary (errors, types, the clock), imported
    when first named: ``import tidings`` costs the command line's every start nothing of the
    runtime it may not use. The SDK adapters likewise: the base install needs neither SDK; the
    HTTP client, which brings in the service's schemas; and PostgreSQL's store, which brings in
    psycopg (a third of a second of every start that SQLite never needs)."""
    if name in _LAZY:
        module, attribute = _LAZY[name]
        value = getattr(importlib.import_module(module), attribute)
        globals()[name] = value  # once: later lookups do not come here
        return value
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
