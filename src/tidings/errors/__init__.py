"""Every failure a caller can act on, as one subclass of :class:`TidingsError`.

Each class carries a stable ``code`` (used by the HTTP layer as the problem type and by the
command line as its message key) and structured attributes, not just a string. A class's
docstring is its default message.

The classes are grouped by what the caller can do about them, one module each, and all of
them are imported from here: the root (:mod:`.base`); bad input, nothing written
(:mod:`.input`); unknown (and foreign) ids (:mod:`.lookup`); refusals by the state of the
thing or a bound it is at (:mod:`.refusals`); the database (:mod:`.store`); the master key
(:mod:`.keys`); the models (:mod:`.models`).
"""

from __future__ import annotations

from tidings.errors.base import TidingsError
from tidings.errors.input import (
    ConfigError,
    InvalidInputError,
    OriginNotAllowedError,
    PayloadTooLargeError,
    PrivateTargetError,
    UnknownModelOrToolError,
    UnknownProfileError,
)
from tidings.errors.keys import (
    MasterKeyError,
    ResultCorruptError,
    RuntimeLockedError,
)
from tidings.errors.lookup import (
    UnknownApprovalError,
    UnknownConversationError,
    UnknownDeadLetterError,
    UnknownInputError,
    UnknownOperationError,
    UnknownPushConfigError,
    UnknownQuestionError,
    UnknownResultError,
    UnknownRunError,
    UnknownTaskError,
)
from tidings.errors.models import (
    ModelError,
    ModelErrorKind,
    ModelSampleError,
)
from tidings.errors.refusals import (
    ApprovalDecidedError,
    BacklogFullError,
    CompactionRefusedError,
    ConversationClosedError,
    DuplicateTaskKeyError,
    InputQueueFullError,
    InstanceNotRunningError,
    NotDeadLetterError,
    OperationSettledError,
    PairingViolationError,
    QuestionDecidedError,
    SlotLostError,
    StaleLeaseError,
    SupervisorClosedError,
)
from tidings.errors.store import (
    CommitOutcomeUnknownError,
    ConnectionLostError,
    CorruptDatabaseError,
    DatabaseBusyError,
    DatabasePathError,
    DiskFullError,
    IntegrityViolationError,
    ReadOnlyDatabaseError,
    SchemaError,
    StoreError,
)

__all__ = (
    "ApprovalDecidedError",
    "BacklogFullError",
    "CommitOutcomeUnknownError",
    "CompactionRefusedError",
    "ConfigError",
    "ConnectionLostError",
    "ConversationClosedError",
    "CorruptDatabaseError",
    "DatabaseBusyError",
    "DatabasePathError",
    "DiskFullError",
    "DuplicateTaskKeyError",
    "InputQueueFullError",
    "InstanceNotRunningError",
    "IntegrityViolationError",
    "InvalidInputError",
    "MasterKeyError",
    "ModelError",
    "ModelErrorKind",
    "ModelSampleError",
    "NotDeadLetterError",
    "OperationSettledError",
    "OriginNotAllowedError",
    "PairingViolationError",
    "PayloadTooLargeError",
    "PrivateTargetError",
    "QuestionDecidedError",
    "ReadOnlyDatabaseError",
    "ResultCorruptError",
    "RuntimeLockedError",
    "SchemaError",
    "SlotLostError",
    "StaleLeaseError",
    "StoreError",
    "SupervisorClosedError",
    "TidingsError",
    "UnknownApprovalError",
    "UnknownConversationError",
    "UnknownDeadLetterError",
    "UnknownInputError",
    "UnknownModelOrToolError",
    "UnknownOperationError",
    "UnknownProfileError",
    "UnknownPushConfigError",
    "UnknownQuestionError",
    "UnknownResultError",
    "UnknownRunError",
    "UnknownTaskError",
)
