"""What a push notification says: an A2A ``StreamResponse`` holding a task status update.

Built from the journal event a delivery copied when it was published, never from the task as it
stands when the attempt is made: every attempt of one notification sends the same body, and a
receiver sees a task's states in the order they happened. Written as A2A 1.0's JSON (the
``a2a-sdk`` parses it into its ``StreamResponse``) without the SDK itself: this layer knows the
kernel's journal, not the protocol's server.

The states follow the A2A mapping of run statuses (docs/a2a.md): queued -> submitted, running ->
working, awaiting approval or a question asked -> input-required, completed, stopped or an
input cancelled -> canceled, failed and needs_attention -> failed.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tidings.push.deliveries import PushDelivery

NOTIFICATION_ID_HEADER = "X-A2A-Notification-Id"
"""The stable id of a notification: the same on every attempt (the receiver's dedupe key)."""
TOKEN_HEADER = "X-A2A-Notification-Token"
"""The config's token, as A2A (and the a2a-sdk's own sender) sends it."""

_RUN_STATES = {
    "queued": "TASK_STATE_SUBMITTED",
    "running": "TASK_STATE_WORKING",
    "awaiting_approval": "TASK_STATE_INPUT_REQUIRED",
    "completed": "TASK_STATE_COMPLETED",
    "failed": "TASK_STATE_FAILED",
    "needs_attention": "TASK_STATE_FAILED",
    "stopped": "TASK_STATE_CANCELED",
}
_EVENT_STATES = {
    "question_asked": "TASK_STATE_INPUT_REQUIRED",
    "input_cancelled": "TASK_STATE_CANCELED",
    "input_accepted": "TASK_STATE_SUBMITTED",
}
PUBLISHED_EVENTS = frozenset({"turn_status", *_EVENT_STATES})
"""The journal events that are announced (what migration 0019's trigger publishes)."""


def task_state(event_type: str, data: dict[str, Any]) -> str:
    """The A2A task state a journal event announces."""
    if event_type == "turn_status":
        return _RUN_STATES[str(data["status"])]
    return _EVENT_STATES[event_type]


def rfc3339(at_us: int) -> str:
    stamp = datetime.fromtimestamp(at_us / 1_000_000, UTC)
    return stamp.isoformat(timespec="microseconds").replace("+00:00", "Z")


def body(delivery: PushDelivery) -> dict[str, Any]:
    """The notification's JSON body (see the module docstring)."""
    meta: dict[str, Any] = {"seq": delivery.event_seq, "event": delivery.event_type,
                            "notification_id": delivery.notification_id}
    if delivery.run_id is not None:
        meta["run_id"] = delivery.run_id
    if delivery.event_type == "turn_status":
        meta["run_status"] = delivery.data.get("status")
    if delivery.data.get("failure_code"):
        meta["failure_code"] = delivery.data["failure_code"]
    return {"statusUpdate": {
        "taskId": delivery.task_id,
        "contextId": delivery.conversation_id,
        "status": {"state": task_state(delivery.event_type, delivery.data),
                   "timestamp": rfc3339(delivery.published_at_us)},
        "metadata": {"tidings": meta},
    }}


__all__ = ("NOTIFICATION_ID_HEADER", "PUBLISHED_EVENTS", "TOKEN_HEADER", "body", "task_state")
