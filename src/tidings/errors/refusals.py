"""Refusals: the state of the thing -- a conversation, its slot, a decision, an operation, a
lease, this instance -- or a bound it is at refuses the request, and nothing was changed."""

from __future__ import annotations

from collections.abc import Sequence

from tidings.errors.base import TidingsError

# -- the state of the thing refuses the request ------------------------------------------------


class ConversationClosedError(TidingsError):
    """The conversation does not take this input in its current status; nothing was written."""

    code = "conversation_closed"

    def __init__(self, conversation_id: str, status: str) -> None:
        super().__init__(f"conversation {conversation_id!r} is {status}")
        self.conversation_id = conversation_id
        self.status = status


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


class ApprovalDecidedError(TidingsError):
    """The approval already has a terminal state that this decision would contradict; the
    state stands and nothing was changed."""

    code = "approval_decided"

    def __init__(self, approval_id: str, status: str) -> None:
        super().__init__(f"approval {approval_id!r} is already {status}")
        self.approval_id = approval_id
        self.status = status


class QuestionDecidedError(TidingsError):
    """The question already has an answer that this one would contradict; the answer stands
    and nothing was changed."""

    code = "question_decided"

    def __init__(self, question_id: str, status: str) -> None:
        super().__init__(f"question {question_id!r} is already {status}")
        self.question_id = question_id
        self.status = status


class OperationSettledError(TidingsError):
    """The operation is already settled; a settled outcome is never overwritten."""

    code = "operation_settled"

    def __init__(self, operation_id: str, state: str) -> None:
        super().__init__(f"operation {operation_id!r} is already {state}")
        self.operation_id = operation_id
        self.state = state


class NotDeadLetterError(TidingsError):
    """The delivery is not a dead letter (any more): it was retried or discarded already, and
    nothing was changed."""

    code = "not_dead_letter"

    def __init__(self, delivery_id: int, state: str) -> None:
        super().__init__(f"delivery {delivery_id} is not a dead letter: it is {state}")
        self.delivery_id = delivery_id
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


class DuplicateTaskKeyError(TidingsError):
    """A process with this task key is already running; nothing was started."""

    code = "duplicate_task_key"

    def __init__(self, task_key: str) -> None:
        super().__init__(f"a process for task {task_key!r} is already running")
        self.task_key = task_key


# -- admission bounds: back off and retry ------------------------------------------------------


class BacklogFullError(TidingsError):
    """The conversation's unacknowledged backlog is at its limit; nothing was published."""

    code = "backlog_full"

    def __init__(self, conversation_id: str, limit: int) -> None:
        super().__init__(
            f"conversation {conversation_id!r} already holds {limit} unacknowledged signals"
        )
        self.conversation_id = conversation_id
        self.limit = limit


class InputQueueFullError(TidingsError):
    """The conversation already holds as many queued inputs as it admits; nothing was written."""

    code = "input_queue_full"

    def __init__(self, conversation_id: str, limit: int) -> None:
        super().__init__(f"conversation {conversation_id!r} already holds {limit} queued inputs")
        self.conversation_id = conversation_id
        self.limit = limit


# -- this instance is closed -------------------------------------------------------------------


class InstanceNotRunningError(TidingsError):
    """This runtime instance is closed or was declared gone; it may not claim or accept."""

    code = "instance_not_running"


class SupervisorClosedError(TidingsError):
    """The supervisor is closed; it starts no more processes."""

    code = "supervisor_closed"
