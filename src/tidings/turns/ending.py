"""How a turn ends: its answer, a refusal, a failure or a stop, committed with everything that
goes with it -- the inputs it read, the acknowledgment or release of its signals, what its
tasks and children are owed, the run's end and the slot's release (S7, T5, M4, M14, M16).

:class:`TurnEnding` is a collaborator the :class:`~tidings.turns.runner.TurnRunner` holds and
calls; it writes through the turn's :class:`~tidings.turns.writer.TurnWriter` and settles what
the turn owes through its :class:`~tidings.turns.obligations.TurnObligations`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Sequence
from typing import Any

from tidings.conversations.approvals import Approvals
from tidings.conversations.questions import expire_run_questions
from tidings.errors import CommitOutcomeUnknownError, SlotLostError, StaleLeaseError, TidingsError
from tidings.mail import child_requests
from tidings.mail.batching import combined_sources, receipt_of
from tidings.mail.door import Door
from tidings.models.base import ModelReply
from tidings.records.outbox import Outbox
from tidings.records.transcript import ConversationTx
from tidings.store import Tx
from tidings.tasks import journal
from tidings.tasks.notify import NOTIFICATION_KIND
from tidings.turns.fallback import model_failures
from tidings.turns.obligations import TurnObligations
from tidings.turns.plan import TurnFailed, TurnPlan, TurnProgress, TurnTasks
from tidings.turns.writer import TurnWriter
from tidings.types import Run, RunStatus, StartKind


class TurnEnding:
    """The end units of a turn (see the module docstring)."""

    def __init__(
        self,
        writer: TurnWriter,
        obligations: TurnObligations,
        outbox: Outbox,
        door: Door,
        *,
        tasks: TurnTasks | None = None,
        approvals: Approvals | None = None,
    ) -> None:
        self.writer = writer
        self.obligations = obligations
        self.outbox = outbox
        self.door = door
        self.tasks = tasks
        self.approvals = approvals

    async def finish_refused(
        self, plan: TurnPlan, progress: TurnProgress, failure: TurnFailed
    ) -> Run:
        if len(progress.pending) > 1:
            # A degraded reply does not carry a batch: the head alone, the rest stay queued.
            progress.pending = progress.pending[:1]
            progress.taken = {progress.pending[0].input_id}
        received = "\n\n".join(i.content for i in plan.inputs if i.input_id in progress.taken)
        text = (f"(The model refused this input ({failure.code}); it was received as "
                f"follows.)\n\n{received}")
        return await self.finish_completed(
            plan, progress, ModelReply(text), meta={"refused": failure.code,
                                                    "errors": list(failure.errors)[-8:]},
        )

    async def finish_completed(
        self, plan: TurnPlan, progress: TurnProgress, reply: ModelReply,
        meta: dict[str, Any] | None = None,
    ) -> Run:
        def write(cx: ConversationTx) -> Run:
            self.writer.materialize_pending(cx, plan, progress)
            # Every notification delivered so far was in this turn's request: handled (T5).
            journal.consume(cx, journal.unconsumed(cx))
            cx.append_assistant(reply.text, run_id=plan.run_id,
                                meta={"model": progress.model, "step": progress.steps,
                                      **(meta or {}),
                                      **_reply_sources(cx, plan, progress)})
            if plan.lease is not None and plan.lease.deliveries:
                self.outbox.ack_later(cx.tx, plan.lease)
            self.obligations.settle_turn_tasks(cx, plan, progress, stopped=False)
            # A request a parent opened in this (child) conversation is answered (M16).
            answered = [child_requests.answer(cx, item, status="completed", text=reply.text,
                                     run_id=plan.run_id) for item in plan.inputs]
            progress.child_replied = any(answered)
            # Tasks that ended during the turn are delivered now, for the next turn to read.
            progress.more_work = bool(journal.deliver_due(cx, self.door))
            run = self._end_run(cx, plan, progress, RunStatus.COMPLETED, None, [])
            if cx.conversation.awaiting_person and plan.trigger is StartKind.PERSON:
                cx.update(awaiting_person=False)
            return run

        try:
            run = await self.writer.commit(plan, progress, write, ahead=_notices_ahead(plan))
        except (SlotLostError, CommitOutcomeUnknownError):
            raise
        except TidingsError as exc:
            # The answer did not commit: give everything back at once (S7).
            raise TurnFailed(RunStatus.FAILED, exc.code, [{"error": exc.message[:200]}]) from exc
        self.obligations.kick_relay(progress)
        return run

    async def finish_failed(
        self, plan: TurnPlan, progress: TurnProgress, failure: TurnFailed
    ) -> Run:
        def write(cx: ConversationTx) -> Run:
            self.writer.materialize_pending(cx, plan, progress)
            # The database, not memory, says which of this run's calls are still open.
            unanswered = cx.open_tool_calls()
            for call in unanswered:
                if failure.code == "shutdown":
                    # The runtime went while the tool ran: whatever it did stands, unknown,
                    # and it is not run again (L2, S9).
                    text, status = (
                        "outcome_unknown: the runtime shut down while this tool ran; it is "
                        "not repeated", "outcome_unknown",
                    )
                else:
                    text, status = (
                        f"cancelled: the turn ended ({failure.code}) before this tool "
                        "finished", "cancelled",
                    )
                cx.append_tool_result(
                    call["call_id"], text, tool_name=call["name"], run_id=plan.run_id,
                    meta={"status": status, "is_error": True},
                )
            if failure.code != "stopped":
                # That answer is each call's first result: a task it started is told as it
                # ends (a person's stop cancels them instead, below).
                journal.commit_calls(cx, plan.run_id, {str(c["call_id"]) for c in unanswered})
            if plan.lease is not None and plan.lease.deliveries:
                with contextlib.suppress(StaleLeaseError):
                    self.outbox.release_in(cx.tx, plan.lease, _slug(failure.code))
            # Only a person's stop cancels what the run started; a shutdown, a failure or a
            # timeout leaves its tasks to be reported (as they end, or as lost).
            self.obligations.settle_turn_tasks(
                cx, plan, progress, stopped=failure.code == "stopped"
            )
            if self.approvals is not None:
                self.approvals.expire_run(cx, plan.run_id)
            expire_run_questions(cx, plan.run_id)
            if failure.status is not RunStatus.NEEDS_ATTENTION:
                # The parent is told how its request ended; a run that needs attention may
                # still answer it after a retry.
                text = f"(the child's turn ended {failure.status.value}: {failure.code})"
                answered = [child_requests.answer(cx, item, status=failure.status.value, text=text,
                                         run_id=plan.run_id) for item in plan.inputs]
                progress.child_replied = any(answered)
            # Delivered stays, consumed does not; the error is kept with them (T5).
            kept = journal.unconsumed(cx)
            journal.keep_unconsumed(cx, kept, failure.code)
            progress.more_work = bool(journal.deliver_due(cx, self.door)) or bool(kept)
            # A stop's suppression was written by the stop itself (a person's post since then
            # has lifted it, and that stands).
            if failure.status in (RunStatus.FAILED, RunStatus.NEEDS_ATTENTION):
                cx.update(awaiting_person=True)
            return self._end_run(cx, plan, progress, failure.status, failure.code, failure.errors)

        run = await self.writer.commit(plan, progress, write, ahead=_notices_ahead(plan))
        self.obligations.kick_relay(progress)
        if failure.code == "stopped" and self.tasks is not None:
            # A turn-lifetime task does not outlive its stopped turn.
            self.tasks.kill(progress.turn_tasks + progress.drained)
        return run

    def _end_run(
        self,
        cx: ConversationTx,
        plan: TurnPlan,
        progress: TurnProgress,
        status: RunStatus,
        code: str | None,
        errors: Sequence[dict[str, Any]],
    ) -> Run:
        cx.tx.run_later(
            "finish_run", run_id=plan.run_id, status=status.value, failure_code=code,
            model=progress.model, steps=progress.steps, now_us=cx.now_us,
            expect=1, mismatch=lambda: SlotLostError(plan.conversation_id),
        )
        usage = progress.usage
        if usage.model_calls:
            # Whatever the end: a failed or stopped run's calls were spent all the same (B8).
            cx.tx.run_later(
                "record_run_usage", conversation_id=plan.conversation_id, run_id=plan.run_id,
                model_calls=usage.model_calls, input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens, cache_read_tokens=usage.cache_read_tokens,
                cache_write_tokens=usage.cache_write_tokens,
            )
        failures = tuple(model_failures(errors)) if status is not RunStatus.COMPLETED else ()
        if failures:
            # Which models were asked and why each failed, on the run itself (B7).
            cx.tx.run_later(
                "record_run_failures", conversation_id=plan.conversation_id,
                run_id=plan.run_id, models=json.dumps(failures),
            )
        run = Run(
            run_id=plan.run_id, conversation_id=plan.conversation_id, trigger=plan.trigger,
            status=status, model=progress.model, failure_code=code, steps=progress.steps,
            created_at_us=plan.started_at_us, started_at_us=plan.started_at_us,
            ended_at_us=cx.now_us, usage=usage, model_failures=failures,
        )
        data: dict[str, Any] = {"run_public_id": plan.run_id, "status": status.value}
        if code is not None:
            data["failure_code"] = code
        if errors:
            data["errors"] = list(errors)[-8:]
            if failures:
                data["model_failures"] = list(failures)
            # The route spent (a model skipped as unavailable spent nothing): a retry of a
            # mail run does not renew it (M10).
            data["models_spent"] = list(dict.fromkeys(
                str(e["model"]) for e in errors
                if e.get("model") and e.get("kind") in ("retryable", "permanent")
            ))
        cx.record_event("turn_status", data, plan.run_id)
        cx.slot.release(plan.slot_token)
        if progress.released is not None:
            cx.tx.after_commit(progress.released)
        # Read under the lock, before the slot is released: what it shows was committed
        # before, and whatever it misses will find the slot free.
        progress.more_work = more_work = (
            progress.more_work
            or cx.queued_count > 0
            or (cx.signal_backlog > 0 and self._ready_signals(cx))
        )
        # Nothing waits, read under the lock after the unit began: a re-check would start
        # nothing now (its inputs, ready signals and notifications are what it reads; the
        # notifications this unit delivered or kept made ``more_work`` true above).
        progress.settled_ns = None if more_work else cx.locked_ns
        return run

    def _ready_signals(self, cx: ConversationTx) -> bool:
        row = cx.tx.one(
            "has_ready_signals", conversation_id=cx.conversation_id, now_us=cx.now_us,
            max_attempts=self.outbox.config.max_attempts,
        )
        return bool(row and row["ready"])


def _reply_sources(cx: ConversationTx, plan: TurnPlan, progress: TurnProgress) -> dict[str, Any]:
    """A supplementary reply's sender fields and ``callback_sources`` (M9): a combined report
    of several worker finals names them all and no single sender."""
    mail = [receipt_of(i, owner=cx.conversation.owner) for i in plan.inputs
            if i.origin.is_kernel and i.input_id in progress.taken]
    return combined_sources(mail).as_meta() if mail else {}


def _notices_ahead(plan: TurnPlan) -> Callable[[Tx], None] | None:
    """A turn that began by reading task notifications handles them as it ends (T5): their
    tasks' rows are asked for with the lock (:meth:`Tx.read_ahead`)."""
    if not any(m.meta.get("kind") == NOTIFICATION_KIND for m in plan.appended):
        return None
    return journal.unconsumed_ahead(plan.conversation_id)


def _slug(code: str) -> str:
    cleaned = "".join(ch if ch.isalnum() or ch in "_.:-" else "_" for ch in code.lower())
    return cleaned if cleaned[:1].isalpha() else f"turn_{cleaned}"[:64]


__all__ = ("TurnEnding",)
