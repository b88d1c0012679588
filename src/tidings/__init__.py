"""tidings: the durable kernel of an LLM-agent runtime.

Every fact the runtime learns on its own reaches the right turn of the right conversation, at
a safe point, once as far as the model is concerned, through any crash.
"""

from __future__ import annotations

from tidings.clock import Clock, ManualClock, SystemClock
from tidings.errors import (
    BacklogFullError,
    CommitOutcomeUnknownError,
    ConnectionLostError,
    DatabaseBusyError,
    DiskFullError,
    InstanceNotRunningError,
    InvalidInputError,
    OperationSettledError,
    PayloadTooLargeError,
    StaleLeaseError,
    StoreError,
    TidingsError,
    UnknownOperationError,
)
from tidings.outbox import Outbox, OutboxConfig, SweepReport
from tidings.store import PostgresStore, SqliteStore, Store, Tx, open_store
from tidings.types import (
    DeadLetter,
    Delivery,
    DeliveryState,
    Lease,
    Operation,
    OperationState,
    Published,
    QueueStats,
    ReconcileReport,
    Signal,
)

__version__ = "0.1.0"

__all__ = (
    "BacklogFullError",
    "Clock",
    "CommitOutcomeUnknownError",
    "ConnectionLostError",
    "DatabaseBusyError",
    "DeadLetter",
    "Delivery",
    "DeliveryState",
    "DiskFullError",
    "InstanceNotRunningError",
    "InvalidInputError",
    "Lease",
    "ManualClock",
    "Operation",
    "OperationSettledError",
    "OperationState",
    "Outbox",
    "OutboxConfig",
    "PayloadTooLargeError",
    "PostgresStore",
    "Published",
    "QueueStats",
    "ReconcileReport",
    "Signal",
    "SqliteStore",
    "StaleLeaseError",
    "Store",
    "StoreError",
    "SweepReport",
    "SystemClock",
    "TidingsError",
    "Tx",
    "UnknownOperationError",
    "__version__",
    "open_store",
)
