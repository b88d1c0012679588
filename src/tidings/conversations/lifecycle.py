"""Restart as an operation (L2).

An authorized restart is committed as an accepted ``restart`` operation, owned by the
conversation that asked for it, before anything else happens; the caller is answered
"accepted, not completed". The instance that accepted it then goes away (its host exits or
re-executes it). Reconciliation leaves a restart accepted -- every other unsettled operation of
a gone instance becomes outcome_unknown (S9) -- and the next instance, once fully initialised,
completes it: in one transaction the operation is settled ``completed`` and a
``restart_completed`` signal is published to the owning conversation with the correlated facts
(what asked, which instance went, which came, what the restart interrupted). The signal wakes
the conversation through the outbox like any runtime fact, so exactly one turn handles it; the
settle is conditional on ``accepted``, so two instances racing complete it once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from tidings.clock import Clock
from tidings.errors import OperationSettledError
from tidings.records import operations
from tidings.records.instances import Instance
from tidings.records.outbox import Outbox
from tidings.records.rows import event_from_row
from tidings.records.transcript import ConversationTx
from tidings.store import Store, Tx
from tidings.types import ConversationId, Operation, OperationId

log = logging.getLogger("tidings.lifecycle")

RESTART = "restart"
RESTART_COMPLETED = "restart_completed"


@dataclass(frozen=True, slots=True)
class RestartRequest:
    """Who asked for a restart, to correlate its completion with the asking message."""

    reason: str = ""
    input_id: str | None = None
    run_id: str | None = None
    call_id: str | None = None

    def facts(self) -> dict[str, Any]:
        return {k: v for k, v in (("reason", self.reason), ("input_id", self.input_id),
                                  ("run_id", self.run_id), ("call_id", self.call_id)) if v}


def accept_restart(
    cx: ConversationTx, instance: Instance, request: RestartRequest,
    *, idempotency_key: str | None = None,
) -> Operation:
    """Commit the restart as accepted (in the caller's unit on the locked conversation)."""
    operation = operations.accept(
        cx.tx, instance, RESTART, cx.conversation_id, idempotency_key=idempotency_key
    )
    cx.record_event(
        "restart_accepted",
        {"operation_id": operation.operation_id, "instance_id": instance.instance_id,
         "status": "accepted, not completed", **request.facts()},
        request.run_id,
    )
    return operation


async def complete_restarts(
    store: Store, outbox: Outbox, instance: Instance, clock: Clock, *, limit: int = 100
) -> list[OperationId]:
    """Complete the restarts that instances now gone accepted. Returns those completed here."""
    rows = await store.read(
        lambda tx: tx.all("pending_restarts", instance_id=instance.instance_id, limit=limit)
    )
    done: list[OperationId] = []
    for row in rows:
        operation_id = OperationId(row["operation_id"])
        conversation_id = ConversationId(row["owner"])
        gone = str(row["origin_instance"])
        # The event is stamped when its unit locked the conversation, a moment before the
        # operation: look a minute back.
        since = int(row["accepted_at_us"]) - 60_000_000

        def complete(
            tx: Tx, operation_id: OperationId = operation_id,
            conversation_id: ConversationId = conversation_id, gone: str = gone,
            since: int = since,
        ) -> bool:
            cx = ConversationTx.lock(tx, conversation_id, clock)
            asked: dict[str, Any] = {}
            for event in tx.all("events_of_type", conversation_id=conversation_id,
                                type="restart_accepted", since_us=since, limit=50):
                data = event_from_row(event).data
                if data.get("operation_id") == operation_id:
                    asked = {k: v for k, v in data.items()
                             if k in ("reason", "input_id", "run_id", "call_id")}
            interrupted = [
                {"task_key": r["task_key"], "state": r["state"], "command": r["command"][:200]}
                for r in tx.all("interrupted_tasks", conversation_id=conversation_id,
                                instance_id=gone, since_us=since, limit=50)
            ]
            facts: dict[str, Any] = {
                "operation_id": operation_id, "requested": asked,
                "previous_instance": gone, "instance_id": instance.instance_id,
                "interrupted_tasks": interrupted,
                "note": "interrupted work is not repeated; its outcome is as stated",
            }
            try:
                operations.complete(
                    tx, instance, operation_id, {"instance_id": instance.instance_id}
                )
            except OperationSettledError:
                return False  # another instance completed it first
            outbox.publish(tx, conversation_id, RESTART_COMPLETED, facts,
                           idempotency_key=f"restart-completed-{operation_id}",
                           operation_id=operation_id)
            cx.record_event(RESTART_COMPLETED, facts, asked.get("run_id"))
            cx.save()
            return True

        if await store.transact(complete, route=conversation_id):
            log.info("completed restart %s of conversation %s", operation_id, conversation_id)
            done.append(operation_id)
    return done


__all__ = ("RESTART", "RESTART_COMPLETED", "RestartRequest", "accept_restart",
           "complete_restarts")
