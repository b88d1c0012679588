"""Unknown ids: no such thing is visible to this principal.

A foreign id gets the very same answer as an unknown one, so an answer never tells whether
someone else's conversation, run or result exists.
"""

from __future__ import annotations

from tidings.errors.base import TidingsError


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


class UnknownApprovalError(TidingsError):
    """No such approval in this conversation (a foreign one gets the same answer)."""

    code = "unknown_approval"

    def __init__(self, approval_id: str) -> None:
        super().__init__(f"no approval {approval_id!r}")
        self.approval_id = approval_id


class UnknownQuestionError(TidingsError):
    """No such question in this conversation (a foreign one gets the same answer)."""

    code = "unknown_question"

    def __init__(self, question_id: str) -> None:
        super().__init__(f"no question {question_id!r}")
        self.question_id = question_id


class UnknownOperationError(TidingsError):
    """No such operation."""

    code = "unknown_operation"

    def __init__(self, operation_id: str) -> None:
        super().__init__(f"no operation {operation_id!r}")
        self.operation_id = operation_id


class UnknownDeadLetterError(TidingsError):
    """No such dead letter."""

    code = "unknown_dead_letter"

    def __init__(self, delivery_id: int) -> None:
        super().__init__(f"no dead letter {delivery_id}")
        self.delivery_id = delivery_id


class UnknownResultError(TidingsError):
    """No such result is visible to this conversation."""

    code = "unknown_result"

    def __init__(self, result_id: str) -> None:
        # The same words whether the id never existed, expired, or belongs to someone else.
        super().__init__(f"no result {result_id!r}")
        self.result_id = result_id
