"""Every failure a caller can act on, as one subclass of :class:`TidingsError`.

Each class carries a stable ``code`` (used by the HTTP layer as the problem type and by the
command line as its message key) and structured attributes, not just a string. A class's
docstring is its default message.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence


class TidingsError(Exception):
    """tidings could not do what was asked."""

    code: str = "tidings_error"

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (type(self).__doc__ or "").strip())

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


# -- bad input: nothing was written ------------------------------------------------------------


class InvalidInputError(TidingsError):
    """The input is malformed; nothing was written."""

    code = "invalid_input"


class PayloadTooLargeError(InvalidInputError):
    """The payload is larger than the configured bound; nothing was written."""

    code = "payload_too_large"

    def __init__(self, size_bytes: int, limit_bytes: int) -> None:
        super().__init__(f"payload is {size_bytes} bytes; the limit is {limit_bytes} bytes")
        self.size_bytes = size_bytes
        self.limit_bytes = limit_bytes


class UnknownModelOrToolError(InvalidInputError):
    """The profile names a model or a tool this runtime does not have; nothing was written."""

    code = "unknown_model_or_tool"

    def __init__(
        self,
        *,
        unknown_models: Sequence[str],
        unknown_tools: Sequence[str],
        registered_models: Sequence[str],
        registered_tools: Sequence[str],
    ) -> None:
        said = []
        if unknown_models:
            said.append(f"unknown model(s) {', '.join(map(repr, unknown_models))} (registered: "
                        f"{', '.join(map(repr, registered_models)) or 'none'})")
        if unknown_tools:
            said.append(f"unknown tool(s) {', '.join(map(repr, unknown_tools))} (registered: "
                        f"{', '.join(map(repr, registered_tools)) or 'none'})")
        super().__init__("the profile names " + "; ".join(said))
        self.unknown_models = tuple(unknown_models)
        self.unknown_tools = tuple(unknown_tools)
        self.registered_models = tuple(registered_models)
        self.registered_tools = tuple(registered_tools)


class BacklogFullError(TidingsError):
    """The conversation's unacknowledged backlog is at its limit; nothing was published."""

    code = "backlog_full"

    def __init__(self, conversation_id: str, limit: int) -> None:
        super().__init__(
            f"conversation {conversation_id!r} already holds {limit} unacknowledged signals"
        )
        self.conversation_id = conversation_id
        self.limit = limit


class UnknownOperationError(TidingsError):
    """No such operation."""

    code = "unknown_operation"

    def __init__(self, operation_id: str) -> None:
        super().__init__(f"no operation {operation_id!r}")
        self.operation_id = operation_id


class OperationSettledError(TidingsError):
    """The operation is already settled; a settled outcome is never overwritten."""

    code = "operation_settled"

    def __init__(self, operation_id: str, state: str) -> None:
        super().__init__(f"operation {operation_id!r} is already {state}")
        self.operation_id = operation_id
        self.state = state


class StaleLeaseError(TidingsError):
    """The lease token is not the current unexpired lease; nothing was changed."""

    code = "stale_lease"

    def __init__(self, token: str, delivery_ids: Sequence[int]) -> None:
        super().__init__(
            f"lease {token[:8]}… no longer holds deliveries {sorted(delivery_ids)}; "
            "they expired, were reclaimed or were already settled"
        )
        self.token = token
        self.delivery_ids = tuple(delivery_ids)


class InstanceNotRunningError(TidingsError):
    """This runtime instance is closed or was declared gone; it may not claim or accept."""

    code = "instance_not_running"


# -- the store ---------------------------------------------------------------------------------


class StoreError(TidingsError):
    """The database refused the operation."""

    code = "store_error"

    def __init__(self, message: str | None = None, *, db_code: str | None = None) -> None:
        super().__init__(message)
        self.db_code = db_code


class DatabaseBusyError(StoreError):
    """The database stayed locked by another writer past the busy timeout; nothing was written."""

    code = "database_busy"


class DiskFullError(StoreError):
    """The database's disk is full; nothing of this transaction was written."""

    code = "disk_full"


class ConnectionLostError(StoreError):
    """The connection to the database was lost before the transaction committed."""

    code = "connection_lost"


class CommitOutcomeUnknownError(StoreError):
    """The connection was lost while committing: the transaction may or may not have landed."""

    code = "commit_outcome_unknown"


class IntegrityViolationError(StoreError):
    """A database constraint refused the write."""

    code = "integrity_violation"


class ReadOnlyDatabaseError(StoreError):
    """The database is read-only."""

    code = "read_only_database"


class CorruptDatabaseError(StoreError):
    """The database file is corrupt or is not a database."""

    code = "corrupt_database"


class SchemaError(StoreError):
    """The database schema is newer than this version of tidings, or a migration failed."""

    code = "schema_error"


class DatabasePathError(StoreError):
    """The database file cannot be opened where it was asked for; nothing was created."""

    code = "database_path"

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"cannot open the database {path!r}: {reason}")
        self.path = path
        self.reason = reason


class UnknownDeadLetterError(TidingsError):
    """No such dead letter."""

    code = "unknown_dead_letter"

    def __init__(self, delivery_id: int) -> None:
        super().__init__(f"no dead letter {delivery_id}")
        self.delivery_id = delivery_id


class NotDeadLetterError(TidingsError):
    """The delivery is not a dead letter (any more): it was retried or discarded already, and
    nothing was changed."""

    code = "not_dead_letter"

    def __init__(self, delivery_id: int, state: str) -> None:
        super().__init__(f"delivery {delivery_id} is not a dead letter: it is {state}")
        self.delivery_id = delivery_id
        self.state = state


# -- conversations, the door, the coordinator ------------------------------------------------


class UnknownConversationError(TidingsError):
    """No such conversation is visible to this principal."""

    code = "unknown_conversation"

    def __init__(self, conversation_id: str) -> None:
        # A foreign conversation gets the very same answer as an unknown one.
        super().__init__(f"no conversation {conversation_id!r}")
        self.conversation_id = conversation_id


class UnknownRunError(TidingsError):
    """No such run in this conversation."""

    code = "unknown_run"

    def __init__(self, run_id: str) -> None:
        super().__init__(f"no run {run_id!r}")
        self.run_id = run_id


class UnknownTaskError(TidingsError):
    """No such task in this conversation (a foreign one gets the same answer)."""

    code = "unknown_task"

    def __init__(self, task_key: str) -> None:
        super().__init__(f"no task {task_key!r}")
        self.task_key = task_key


class UnknownInputError(TidingsError):
    """No such input is visible to this principal (a foreign one gets the same answer)."""

    code = "unknown_input"

    def __init__(self, input_id: str) -> None:
        super().__init__(f"no input {input_id!r}")
        self.input_id = input_id


class UnknownPushConfigError(TidingsError):
    """No such push-notification config for this task and principal."""

    code = "unknown_push_config"

    def __init__(self, task_id: str, config_id: str) -> None:
        super().__init__(f"no push-notification config {config_id!r} for task {task_id!r}")
        self.task_id = task_id
        self.config_id = config_id


class PrivateTargetError(InvalidInputError):
    """A webhook's URL names (or resolves to) a private, loopback or link-local address, and the
    operator does not allow such targets; nothing was written."""

    code = "private_target"

    def __init__(self, url: str) -> None:
        super().__init__(
            f"url {url!r} names a private, loopback or link-local address; the operator may "
            "allow such targets (tidings serve --allow-private-webhooks)")
        self.url = url


class RuntimeLockedError(TidingsError):
    """The runtime started locked and waits for its master key; nothing was written."""

    code = "runtime_locked"

    def __init__(self) -> None:
        super().__init__("the runtime is locked until its master key is unlocked")


class UnknownApprovalError(TidingsError):
    """No such approval in this conversation (a foreign one gets the same answer)."""

    code = "unknown_approval"

    def __init__(self, approval_id: str) -> None:
        super().__init__(f"no approval {approval_id!r}")
        self.approval_id = approval_id


class ApprovalDecidedError(TidingsError):
    """The approval already has a terminal state that this decision would contradict; the
    state stands and nothing was changed."""

    code = "approval_decided"

    def __init__(self, approval_id: str, status: str) -> None:
        super().__init__(f"approval {approval_id!r} is already {status}")
        self.approval_id = approval_id
        self.status = status


class ModelSampleError(TidingsError):
    """A tool asked the conversation's models for a completion (an MCP server's sampling) and
    none of them answered; the run goes on."""

    code = "sample_failed"

    def __init__(self, reason: str) -> None:
        super().__init__(f"no model of the conversation answered: {reason}")
        self.reason = reason


class UnknownQuestionError(TidingsError):
    """No such question in this conversation (a foreign one gets the same answer)."""

    code = "unknown_question"

    def __init__(self, question_id: str) -> None:
        super().__init__(f"no question {question_id!r}")
        self.question_id = question_id


class QuestionDecidedError(TidingsError):
    """The question already has an answer that this one would contradict; the answer stands
    and nothing was changed."""

    code = "question_decided"

    def __init__(self, question_id: str, status: str) -> None:
        super().__init__(f"question {question_id!r} is already {status}")
        self.question_id = question_id
        self.status = status


class ConversationClosedError(TidingsError):
    """The conversation does not take this input in its current status; nothing was written."""

    code = "conversation_closed"

    def __init__(self, conversation_id: str, status: str) -> None:
        super().__init__(f"conversation {conversation_id!r} is {status}")
        self.conversation_id = conversation_id
        self.status = status


class UnknownProfileError(InvalidInputError):
    """No profile of that name is configured; nothing was written."""

    code = "unknown_profile"

    def __init__(self, name: str, known: Sequence[str]) -> None:
        listed = ", ".join(sorted(known)) or "none is configured"
        super().__init__(f"no profile is named {name!r} (known: {listed})")
        self.name = name
        self.known = tuple(known)


class ConfigError(TidingsError):
    """The configuration file is malformed; nothing was started.

    ``line`` is the file's line at fault (1-based) when it could be found; ``key`` the dotted
    key path (``models.fast.api_key_env``) when one key is at fault.
    """

    code = "config_error"

    def __init__(
        self, message: str, *, path: str, line: int | None = None, key: str | None = None
    ) -> None:
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {key}: {message}" if key else f"{where}: {message}")
        self.path = path
        self.line = line
        self.key = key
        self.reason = message


class OriginNotAllowedError(InvalidInputError):
    """Only the kernel may write task_result and child inputs; nothing was written."""

    code = "origin_not_allowed"

    def __init__(self, origin: str) -> None:
        super().__init__(f"origin {origin!r} is the kernel's own; callers may not supply it")
        self.origin = origin


class PairingViolationError(TidingsError):
    """The write would put a message between a tool call and its result; nothing was written."""

    code = "pairing_violation"

    def __init__(self, conversation_id: str, detail: str) -> None:
        super().__init__(f"conversation {conversation_id!r}: {detail}")
        self.conversation_id = conversation_id


class SlotLostError(TidingsError):
    """This turn no longer holds its conversation's slot; its writes were refused."""

    code = "slot_lost"

    def __init__(self, conversation_id: str) -> None:
        super().__init__(f"the slot of conversation {conversation_id!r} was lost or expired")
        self.conversation_id = conversation_id


class CompactionRefusedError(TidingsError):
    """Compaction needs the conversation's slot: a turn is active or a start is queued."""

    code = "compaction_refused"

    def __init__(self, conversation_id: str, reason: str) -> None:
        super().__init__(f"cannot compact {conversation_id!r} now: {reason}")
        self.conversation_id = conversation_id
        self.reason = reason


class InputQueueFullError(TidingsError):
    """The conversation already holds as many queued inputs as it admits; nothing was written."""

    code = "input_queue_full"

    def __init__(self, conversation_id: str, limit: int) -> None:
        super().__init__(f"conversation {conversation_id!r} already holds {limit} queued inputs")
        self.conversation_id = conversation_id
        self.limit = limit


# -- results -----------------------------------------------------------------------------------


class UnknownResultError(TidingsError):
    """No such result is visible to this conversation."""

    code = "unknown_result"

    def __init__(self, result_id: str) -> None:
        # The same words whether the id never existed, expired, or belongs to someone else.
        super().__init__(f"no result {result_id!r}")
        self.result_id = result_id


class MasterKeyError(TidingsError):
    """The master key is missing or malformed; results cannot be sealed or opened."""

    code = "master_key_unavailable"


class ResultCorruptError(TidingsError):
    """A stored envelope failed authentication: it was altered or sealed under another key."""

    code = "result_corrupt"


# -- background processes ----------------------------------------------------------------------


class SupervisorClosedError(TidingsError):
    """The supervisor is closed; it starts no more processes."""

    code = "supervisor_closed"


class DuplicateTaskKeyError(TidingsError):
    """A process with this task key is already running; nothing was started."""

    code = "duplicate_task_key"

    def __init__(self, task_key: str) -> None:
        super().__init__(f"a process for task {task_key!r} is already running")
        self.task_key = task_key


# -- models ------------------------------------------------------------------------------------


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

