"""Manual compaction (C7): summarise the history through the model and start the window at the
summary.

A compaction holds the conversation's slot, like a turn, for the length of the model call: it
is taken in one unit (refused while a turn holds the slot or a start is queued), the summary is
written and the slot released in another, and a compaction that fails releases the slot it
took. Its holder is named ``compaction:<token>``, so recovery after a crash releases it without
failing a run. It is maintenance, not business: a stop's suppression survives it. The
in-process guard (no compaction beside a turn of this process) is the coordinator's.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Awaitable, Callable, Sequence

from tidings.clock import Clock
from tidings.errors import TidingsError
from tidings.records.transcript import ConversationTx
from tidings.scheduler.slot import take_for_compaction
from tidings.store import Store, Tx
from tidings.support.policy import fenced_json
from tidings.tasks import journal
from tidings.turns.plan import TurnConfig
from tidings.types import Conversation, Message, Profile

Summarize = Callable[[Profile, Sequence[Message]], Awaitable[str]]
"""One summarising model step over a history (the turn runner's)."""


async def compact(
    store: Store, clock: Clock, conversation_id: str, *, owner: str | None,
    summarize: Summarize, config: TurnConfig, instance_id: str,
) -> int:
    """Take the slot, summarise, write the hand-off and release the slot; returns the
    summary's message position. The slot is released whatever fails."""
    token = secrets.token_hex(16)

    def locked(tx: Tx) -> ConversationTx:
        return ConversationTx.lock(tx, conversation_id, clock)

    def take(tx: Tx) -> tuple[Conversation, list[Message]]:
        cx = locked(tx)
        taken = take_for_compaction(cx, token, owner, config=config,
                                    instance_id=instance_id)
        cx.save()
        return taken

    def finish(tx: Tx, summary: str, history: list[Message]) -> int:
        cx = locked(tx)
        seq = hand_off(cx, token, summary, history)
        cx.save()
        return seq

    def give_back(tx: Tx) -> None:
        cx = locked(tx)
        cx.slot.release(token)
        cx.save()

    try:
        conversation, history = await store.transact(take, route=conversation_id)
        summary = await summarize(conversation.profile, history)
        return await store.transact(
            lambda tx: finish(tx, summary, history), route=conversation_id
        )
    except BaseException:
        with contextlib.suppress(TidingsError):
            await store.transact(give_back, route=conversation_id)
        raise


def hand_off(cx: ConversationTx, token: str, summary: str, history: Sequence[Message]) -> int:
    """Append the summary, start the window at it and release the slot; returns its position.

    Fenced by ``token``: a compaction whose slot was lost writes nothing.
    """
    cx.slot.require(token)
    # Summarising never erases a long-running task: the hand-off carries every active or
    # unhandled task by reference (T7).
    tasks = journal.open_references(cx)
    text = summary if not tasks else (
        f"{summary}\n<task_references>{fenced_json(tasks)}</task_references>"
    )
    seq = cx.append_user(
        text, meta={"kind": "compaction_summary",
                    "summarized_through": history[-1].seq if history else 0,
                    "task_keys": [t["task_key"] for t in tasks]},
    )
    cx.start_history_at(seq - 1)
    cx.record_event(
        "context_compacted", {"message_seq": seq, "summarized_messages": len(history)}
    )
    cx.slot.release(token)
    return seq


__all__ = ("Summarize", "compact", "hand_off")
