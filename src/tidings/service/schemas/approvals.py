"""The HTTP bodies of approvals (L5): a held tool call and a person's decision on it
(re-exported by :mod:`tidings.service.schemas`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from tidings.conversations.approvals import Approval
from tidings.service.schemas.request import RequestBody


class Decision(RequestBody):
    """A person's decision on a held tool call."""

    approve: bool


class ApprovalOut(BaseModel):
    approval_id: str
    conversation_id: str
    run_id: str
    call_id: str
    tool_name: str
    arguments: dict[str, Any]
    status: Literal["pending", "approved", "denied", "expired", "applied"]
    decided_by: str | None
    requested_at_us: int
    expires_at_us: int
    decided_at_us: int | None
    applied_at_us: int | None

    @classmethod
    def of(cls, a: Approval) -> ApprovalOut:
        return cls(
            approval_id=a.approval_id, conversation_id=a.conversation_id, run_id=a.run_id,
            call_id=a.call_id, tool_name=a.tool_name, arguments=a.arguments,
            status=a.status,  # type: ignore[arg-type]
            decided_by=a.decided_by, requested_at_us=a.requested_at_us,
            expires_at_us=a.expires_at_us, decided_at_us=a.decided_at_us,
            applied_at_us=a.applied_at_us,
        )


class ApprovalList(BaseModel):
    approvals: list[ApprovalOut]

