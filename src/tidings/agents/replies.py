"""What a remote child's task came to, recorded as its request's reply (P5, M16).

The remote's answer becomes the request's reply exactly as a local child's turn answers it, in
one unit that also marks the remote task followed to its end; the relay then gives it to the
parent once, as ``child`` mail (batching, order, stop cascade: all the relay's own).
``completed`` -> the artifacts' text is the reply (``completed``); ``failed`` / ``rejected`` ->
``failed``, ``canceled`` -> ``stopped``, saying what the agent said; ``input-required`` -> the
reply is the agent's question (status ``input_required``), and the parent answers it with
``send`` to the child, which continues the same remote task. A task whose outcome cannot be
learnt is ``lost``.
"""

from __future__ import annotations

from collections.abc import Callable

from tidings.agents.remote import RemoteTask
from tidings.conversations.catalog import Conversations
from tidings.mail.child_requests import REPLY_LIMIT_CHARS
from tidings.records.transcript import ConversationTx
from tidings.store import Row, Store

STATUS = {"completed": "completed", "failed": "failed", "rejected": "failed",
          "canceled": "stopped", "input-required": "input_required",
          "auth-required": "failed"}
"""The reply's status for each state a remote task can stop in."""


class Replies:
    """Writes a remote child request's reply, once, and its remote task's state as last seen."""

    def __init__(self, *, store: Store, conversations: Conversations,
                 replied: Callable[[], None]) -> None:
        self._store = store
        self._conversations = conversations
        self._replied = replied

    async def reply(self, row: Row, status: str, text: str, state: str) -> None:
        """The remote's answer is the request's reply -- once, as a local child's turn answers
        it -- in the unit that ends the following; the relay is kicked."""
        def write(cx: ConversationTx) -> None:
            cx.tx.execute("reply_child_request", input_id=row["input_id"], reply_status=status,
                          reply=text[:REPLY_LIMIT_CHARS], reply_run_id=None, now_us=cx.now_us)
            cx.tx.execute("end_remote_child", request_id=row["request_id"], remote_state=state,
                          now_us=cx.now_us)

        await self._conversations.change(str(row["child_conversation_id"]), write)
        self._replied()

    async def seen(self, request_id: str, state: str) -> None:
        """The remote task's state as last seen, kept for whoever looks (the console)."""
        await self._store.transact(lambda tx: tx.execute(
            "remote_child_state", request_id=request_id, remote_state=state))


def reply_text(agent: str, task: RemoteTask) -> str:
    """The reply's text: the answer, or what the agent said of its task's end."""
    if task.state == "completed":
        return task.text
    said = f": {task.text}" if task.text else ""
    if task.state == "input-required":
        return f"the remote agent {agent} asks{said} (answer it with send to this child)"
    return f"the remote agent {agent}'s task ended {task.state}{said}"


__all__ = ("STATUS", "Replies", "reply_text")
