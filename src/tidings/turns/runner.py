"""The turn runner: one execution of the model loop, from a taken slot to a committed reply.

Every turn -- a person's, a wake-up's, a goal checkpoint's, the kernel's mail -- runs through
:meth:`TurnRunner.run_turn` (C2), so all of them get the same events, persistence,
cancellation and errors. The coordinator hands over a :class:`TurnPlan` made in the unit that
took the conversation's slot: the run, the inputs to read, the history, and the signals claimed
inside that slot (S5).

Commit points, and why:

- A step that calls tools commits the assistant's calls (with the inputs read so far) before
  the tools run, then their results. A crash in between leaves an open call that the next
  holder of the slot answers ``outcome_unknown`` -- the tool is never run again.
- Steers join right after a step's results, in the same transaction: a safe point, never
  between a call and its result (M3).
- The final answer, the materialisation of the inputs not yet written, the acknowledgment of the
  consumed signals and the run's completion commit in one transaction (S7). A failed or stopped
  turn commits no answer, answers its open calls ``cancelled``, and gives its signals back for
  redelivery in the same transaction.

Every write is fenced by the slot token: a turn that lost its slot writes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from tidings.approvals import Approvals
from tidings.clock import Clock, to_us
from tidings.errors import CommitOutcomeUnknownError, SlotLostError, StaleLeaseError, TidingsError
from tidings.mail import relay
from tidings.mail.batching import combined_sources, receipt_of
from tidings.metrics import Metrics
from tidings.models.base import (
    Model,
    ModelError,
    ModelErrorKind,
    ModelReply,
    ModelRequest,
    PromptMessage,
    ToolCall,
)
from tidings.outbox import Outbox
from tidings.policy import receipt_profile
from tidings.store import Store, Tx
from tidings.tasks import journal
from tidings.tools.registry import Tool, ToolContext, ToolOutput, ToolRegistry
from tidings.transcript import ConversationTx
from tidings.turns.context import history_window, prompt_message, runtime_facts
from tidings.turns.history import HistoryCache
from tidings.turns.obligations import TurnObligations
from tidings.turns.plan import (
    TurnChildren,
    TurnConfig,
    TurnFailed,
    TurnOutcome,
    TurnPlan,
    TurnProgress,
    TurnTasks,
)
from tidings.types import (
    Input,
    Message,
    Profile,
    Run,
    RunStatus,
    StartKind,
)

log = logging.getLogger("tidings.turns")
T = TypeVar("T")

TOOL_RESULT_LIMIT = 64 * 1024


class TurnRunner(TurnObligations):
    """Runs turns for the coordinator; holds no per-conversation state between turns."""

    def __init__(
        self,
        store: Store,
        outbox: Outbox,
        models: Mapping[str, Model],
        tools: ToolRegistry,
        clock: Clock,
        config: TurnConfig | None = None,
        *,
        tasks: TurnTasks | None = None,
        children: TurnChildren | None = None,
        approvals: Approvals | None = None,
        on_child_reply: Callable[[], None] | None = None,
        metrics: Metrics | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.store = store
        self.tasks = tasks
        self.children = children
        self.approvals = approvals
        self.on_child_reply = on_child_reply
        self.metrics = metrics
        self.outbox = outbox
        self.models = models
        self.tools = tools
        self.clock = clock
        self.config = config or TurnConfig()
        self._rng = rng or random.Random()
        self.history = HistoryCache(store, limit=self.config.history_messages)

    # -- the loop -----------------------------------------------------------------------------

    async def run_turn(
        self, plan: TurnPlan, *, stop_reason: Callable[[], str | None]
    ) -> TurnOutcome:
        """Run the model loop to a committed answer, or to a committed failure or stop.

        ``stop_reason`` tells, after a cancellation, why the turn was cancelled (``stopped``
        by a person, ``shutdown``, ``slot_lost``); None means the caller's own cancellation,
        which is re-raised after the turn's state is committed.
        """
        progress = TurnProgress(pending=list(plan.inputs), taken={i.input_id for i in plan.inputs})
        if self.metrics is not None and plan.lease is not None and plan.lease.deliveries:
            # From the oldest fact's publication to the turn that reads it (A6).
            oldest = min(d.published_at_us for d in plan.lease.deliveries)
            self.metrics.observe(
                "tidings_wake_seconds",
                "From a signal's publication to the start of the turn that reads it.",
                max(0, plan.started_at_us - oldest) / 1e6, {"trigger": plan.trigger.value},
            )
        early = stop_reason()
        if early is not None and early != "slot_lost":
            # Stopped before it began: end it the way a stopped turn ends.
            stopped = TurnFailed(RunStatus.STOPPED, early, [])
            return TurnOutcome(await self._finish_failed(plan, progress, stopped),
                               more_work=progress.more_work)
        try:
            run = await self._loop(plan, progress)
        except TurnFailed as failed:
            if plan.trigger is StartKind.MAIL and failed.code == "model_permanent":
                # The model refused the receipt itself: the mail completes as a message with
                # what was received, not a retryable run (M10).
                run = await self._finish_refused(plan, progress, failed)
            else:
                run = await self._finish_failed(plan, progress, failed)
        except asyncio.CancelledError:
            reason = stop_reason()
            if reason == "slot_lost":
                raise  # another holder owns the conversation now; write nothing
            stop = TurnFailed(RunStatus.STOPPED, reason or "shutdown", [])
            finishing = asyncio.ensure_future(self._finish_failed(plan, progress, stop))
            try:
                await asyncio.shield(finishing)
            except asyncio.CancelledError:
                await finishing
            if reason is None:
                raise
            run = finishing.result()
        if self.metrics is not None and run.ended_at_us is not None:
            self.metrics.observe(
                "tidings_turn_seconds", "Turn latency, from the slot taken to the run's end.",
                (run.ended_at_us - plan.started_at_us) / 1e6,
                {"status": run.status.value, "trigger": plan.trigger.value},
            )
        return TurnOutcome(run, more_work=progress.more_work)

    async def _loop(self, plan: TurnPlan, progress: TurnProgress) -> Run:
        profile = _retry_profile(plan.profile, plan.inputs)
        if plan.appended:
            self.history.extend(plan.conversation_id, start_seq=plan.history_start_seq,
                                messages=list(plan.appended))
        offered = self.tools.offered(profile.tools)
        if plan.trigger.automatic and profile.automatic_tools == "read_only":
            # A wake-up reads and reports: no write, no new permission (L4).
            offered = tuple(t for t in offered if t.read_only)
        messages = await self.history.window(
            plan.conversation_id, start_seq=plan.history_start_seq,
            last_seq=plan.last_message_seq,
        )
        total = plan.last_message_seq - plan.history_start_seq
        if total > len(messages):
            # Reaching the window's end is not overflow: the newest window is sent (M11).
            progress.trimmed = {"messages_total": total, "messages_sent": len(messages)}
        messages = self._fit(plan, profile, progress, messages, total)
        inputs = plan.inputs
        if plan.trigger is StartKind.MAIL and len(inputs) > 1 and (
            progress.trimmed is not None or self.models.get(profile.model) is None
        ):
            # A batch shares a reply only on the uncut history and a model that can open it;
            # else the head goes alone and the rest stay queued for their own turns (M8).
            inputs = inputs[:1]
            progress.pending = list(inputs)
            progress.taken = {i.input_id for i in inputs}
        messages += [_input_message(i) for i in inputs]
        if plan.notice is not None:
            messages.append(PromptMessage("user", plan.notice, meta=dict(plan.notice_meta)))
        facts = runtime_facts(plan.lease.deliveries) if plan.lease is not None else None
        request = ModelRequest(
            model=profile.model,
            system=profile.system,
            tools=tuple(t.spec for t in offered),
            messages=(),
            suffix=(facts.content,) if facts is not None else (),
        )
        while True:
            if progress.steps >= self.config.max_steps:
                raise TurnFailed(RunStatus.FAILED, "max_steps_exceeded", [])
            progress.steps += 1
            reply = await self._call_model(
                replace(request, messages=tuple(messages)), profile, progress
            )
            if not reply.tool_calls:
                if progress.turn_tasks or progress.turn_children:
                    # The reply is not final while its turn-lifetime tasks or its turn-owned
                    # children's first reports are owed (M4, M16).
                    joined = await self._synthesis_round(plan, progress, reply)
                    if joined is not None:
                        messages.append(PromptMessage("assistant", reply.text))
                        messages += [prompt_message(m) for m in joined]
                        continue
                return await self._finish_completed(plan, progress, reply)
            calls = list(reply.tool_calls)
            held = {
                c.call_id: Approvals.new_id() for c in calls
                if self._needs_approval(profile, offered, c)
            }

            await self._commit(plan, progress, functools.partial(
                self._write_calls, plan=plan, progress=progress, text=reply.text, calls=calls,
                held=held,
            ))
            progress.open_calls = calls
            messages.append(PromptMessage("assistant", reply.text, tool_calls=tuple(calls)))
            outputs = await asyncio.gather(*(
                self._execute(plan, offered, call) if call.call_id not in held
                else self._execute_approved(plan, progress, offered, call, held[call.call_id])
                for call in calls
            ))
            joined = await self._commit(plan, progress, functools.partial(
                self._write_results, plan=plan, progress=progress, outputs=outputs
            ))
            progress.open_calls = []
            progress.taken.update(m.input_id for m in joined if m.input_id is not None)
            for call, output in zip(calls, outputs, strict=True):
                messages.append(
                    PromptMessage("tool", output.content, tool_call_id=call.call_id,
                                  tool_name=call.name)
                )
            messages += [prompt_message(m) for m in joined]

    def _fit(
        self, plan: TurnPlan, profile: Profile, progress: TurnProgress,
        history: list[PromptMessage], total: int,
    ) -> list[PromptMessage]:
        """The newest history that fits the request's bound (M11): the explicit history
        budget, else the leading model's ``context_chars``. A retry prepares its request again
        and is not cut: it is held with ``history_exceeds_fit``, its prompt kept for a model
        with a larger window or an explicit budget."""
        bounds = [b for b in (self.config.history_budget_chars,
                              getattr(self.models.get(profile.model), "context_chars", None))
                  if isinstance(b, int) and b > 0]
        if not bounds:
            return history
        fit = min(bounds)
        fixed = len(profile.system) + sum(_chars(_input_message(i)) for i in plan.inputs)
        sizes = [_chars(m) for m in history]
        if fixed + sum(sizes) <= fit:
            return history
        if any(isinstance(i.meta.get("retry"), dict) for i in plan.inputs):
            raise TurnFailed(RunStatus.NEEDS_ATTENTION, "history_exceeds_fit", [{
                "request_chars": fixed + sum(sizes), "fit_chars": fit, "model": profile.model,
            }])
        start, left = 0, fixed + sum(sizes)
        while start < len(history) and left > fit:
            left -= sizes[start]
            start += 1
        kept = history_window(history[start:])
        progress.trimmed = {"messages_total": total, "messages_sent": len(kept),
                            "fit_chars": fit}
        return kept

    # -- the model ----------------------------------------------------------------------------

    async def _call_model(
        self, request: ModelRequest, profile: Profile, progress: TurnProgress
    ) -> ModelReply:
        """Ask each model of the profile in turn: retry the retryable, skip the unavailable.

        A permanent error fails the run; when every model is spent the run needs attention
        and automatic advancement waits for a person (C8).
        """
        errors: list[dict[str, Any]] = []
        cfg = self.config
        for name in profile.models:
            model = self.models.get(name)
            if model is None:
                errors.append({"model": name, "kind": "unavailable", "error": "not registered"})
                continue
            for attempt in range(1, cfg.model_attempts + 1):
                try:
                    async with asyncio.timeout(to_us(cfg.model_timeout) / 1e6):
                        reply = await model.complete(replace(request, model=name))
                    progress.model = name
                    return reply
                except TimeoutError:
                    error = ModelError(ModelErrorKind.RETRYABLE, "timed out", model=name)
                except ModelError as exc:
                    error = exc
                except Exception as exc:  # an adapter bug must not take the runtime down
                    log.exception("model %s raised an unclassified error", name)
                    error = ModelError(ModelErrorKind.UNAVAILABLE, type(exc).__name__, model=name)
                errors.append(
                    {"model": name, "kind": error.kind.value, "attempt": attempt,
                     "error": error.message[:200]}
                )
                if self.metrics is not None:
                    self.metrics.count(
                        "tidings_model_errors_total", "Failed model calls, by kind.",
                        labels={"model": name, "kind": error.kind.value},
                    )
                if error.kind is ModelErrorKind.PERMANENT:
                    raise TurnFailed(RunStatus.FAILED, error.failure_code, errors)
                if error.kind is ModelErrorKind.UNAVAILABLE:
                    break
                if attempt < cfg.model_attempts:
                    await asyncio.sleep(self._retry_delay(attempt))
        raise TurnFailed(RunStatus.NEEDS_ATTENTION, "model_retries_exhausted", errors)

    def _retry_delay(self, attempt: int) -> float:
        base = to_us(self.config.retry_base) / 1e6
        cap = to_us(self.config.retry_cap) / 1e6
        return float(self._rng.uniform(0, min(cap, base * 2 ** (attempt - 1))))

    # -- tools --------------------------------------------------------------------------------

    async def _execute(self, plan: TurnPlan, offered: Sequence[Tool], call: ToolCall) -> ToolOutput:
        tool = next((t for t in offered if t.name == call.name), None)
        if tool is None:
            return ToolOutput(f"error: no tool named {call.name!r} is available", is_error=True)
        context = ToolContext(plan.conversation_id, plan.run_id, call.call_id)
        try:
            result = await tool.handler(context, call.arguments)
        except asyncio.CancelledError:
            raise
        except TidingsError as exc:
            return ToolOutput(f"error ({exc.code}): {exc.message}", is_error=True)
        except Exception as exc:
            log.info("tool %s failed: %r", call.name, exc)
            return ToolOutput(f"error: {type(exc).__name__}: {exc}", is_error=True)
        output = result if isinstance(result, ToolOutput) else ToolOutput(str(result))
        if len(output.content.encode("utf-8", "replace")) > TOOL_RESULT_LIMIT:
            head = output.content.encode("utf-8", "replace")[:TOOL_RESULT_LIMIT]
            text = head.decode("utf-8", "ignore")
            output = replace(output, content=f"{text}\n[truncated at {TOOL_RESULT_LIMIT} bytes]")
        return output

    # -- commits ------------------------------------------------------------------------------

    async def _commit(
        self, plan: TurnPlan, progress: TurnProgress, write: Callable[[ConversationTx], T]
    ) -> T:
        """Run ``write`` fenced by the slot; once durable, the pending inputs are written."""

        def unit(tx: Tx) -> tuple[T, list[Message]]:
            cx = ConversationTx.lock(tx, plan.conversation_id, self.clock)
            cx.require_slot(plan.slot_token)
            result = write(cx)
            cx.save()
            return result, cx.appended

        submitted = asyncio.ensure_future(self.store.transact(unit, route=plan.conversation_id))
        try:
            result, appended = await asyncio.shield(submitted)
        except asyncio.CancelledError:
            # A stop cannot recall a submitted unit: learn whether it committed, so that the
            # stopped turn's own commit builds on what is durable, then stop.
            try:
                _, appended = await submitted
            except Exception:
                pass  # it did not commit
            else:
                self._committed(plan, progress, appended)
            raise
        self._committed(plan, progress, appended)
        return result

    def _committed(self, plan: TurnPlan, progress: TurnProgress, appended: list[Message]) -> None:
        self.history.extend(
            plan.conversation_id, start_seq=plan.history_start_seq, messages=appended
        )
        progress.pending = []
        progress.trim_recorded = progress.trim_recorded or progress.trimmed is not None
        progress.notice_written = progress.notice_written or plan.notice is not None

    def _materialize_pending(
        self, cx: ConversationTx, plan: TurnPlan, progress: TurnProgress
    ) -> None:
        """Write the inputs read so far, and the turn's own notice, once."""
        # A unit may run more than once before it commits: it reads progress and leaves it
        # alone; :meth:`_commit` records what became durable once it is.
        for item in progress.pending:
            cx.materialize(item, plan.run_id)
        if progress.trimmed is not None and not progress.trim_recorded:
            cx.record_event("context_trimmed",
                            {"run_public_id": plan.run_id, **progress.trimmed}, plan.run_id)
        if plan.notice is not None and not progress.notice_written:
            cx.append_user(plan.notice, run_id=plan.run_id, meta=dict(plan.notice_meta))

    def _write_calls(
        self,
        cx: ConversationTx,
        plan: TurnPlan,
        progress: TurnProgress,
        text: str,
        calls: Sequence[ToolCall],
        held: Mapping[str, str],
    ) -> None:
        self._materialize_pending(cx, plan, progress)
        cx.append_assistant(text, tool_calls=calls, run_id=plan.run_id,
                            meta={"model": progress.model})
        cx.record_event(
            "tool_calls",
            {"run_public_id": plan.run_id,
             "calls": [{"call_id": c.call_id, "name": c.name} for c in calls]},
            plan.run_id,
        )
        if held and self.approvals is not None:
            for call in calls:
                if call.call_id in held:
                    self.approvals.request(
                        cx, held[call.call_id], run_id=plan.run_id, call_id=call.call_id,
                        tool_name=call.name, arguments=call.arguments,
                    )
            cx.record_event(
                "turn_status",
                {"run_public_id": plan.run_id, "status": "awaiting_approval",
                 "approvals": list(held.values())},
                plan.run_id,
            )

    def _write_results(
        self,
        cx: ConversationTx,
        plan: TurnPlan,
        progress: TurnProgress,
        outputs: Sequence[ToolOutput],
    ) -> list[Message]:
        """The step's results, then -- the safe point -- the task notifications that are due
        and the steers (M3, T4). Returns the user-role messages that joined."""
        outputs = [self._settle_delegation(cx, plan, progress, o) for o in outputs]
        for call, output in zip(progress.open_calls, outputs, strict=True):
            cx.append_tool_result(
                call.call_id, output.content, tool_name=call.name, run_id=plan.run_id,
                meta={"is_error": output.is_error, **output.meta},
            )
        joined_from = len(cx.appended)
        for output in outputs:
            # A result that showed a task's end to the model: no notification follows (T8).
            reported = output.meta.get("reported_task_key")
            if isinstance(reported, str) and (task := journal.get(cx, reported)) is not None:
                journal.mark_reported(cx, task)
        for output in outputs:
            task_key = output.meta.get("task_key")
            if isinstance(task_key, str) and (task := journal.get(cx, task_key)) is not None:
                journal.mark_committed(cx, task, during_run=plan.run_id)
                if not task.handed_off and task_key not in progress.turn_tasks:
                    progress.turn_tasks.append(task_key)
        journal.deliver_due(cx, during_run=plan.run_id)
        steers = [
            s for s in cx.queued_steers(self.config.inputs_per_turn)
            if s.input_id not in progress.taken
        ]
        for steer in steers:
            cx.materialize(steer, plan.run_id)
        return [m for m in cx.appended[joined_from:] if m.role == "user"]

    async def _finish_refused(
        self, plan: TurnPlan, progress: TurnProgress, failure: TurnFailed
    ) -> Run:
        if len(progress.pending) > 1:
            # A degraded reply does not carry a batch: the head alone, the rest stay queued.
            progress.pending = progress.pending[:1]
            progress.taken = {progress.pending[0].input_id}
        received = "\n\n".join(i.content for i in plan.inputs if i.input_id in progress.taken)
        text = (f"(The model refused this input ({failure.code}); it was received as "
                f"follows.)\n\n{received}")
        return await self._finish_completed(
            plan, progress, ModelReply(text), meta={"refused": failure.code,
                                                    "errors": list(failure.errors)[-8:]},
        )

    async def _finish_completed(
        self, plan: TurnPlan, progress: TurnProgress, reply: ModelReply,
        meta: dict[str, Any] | None = None,
    ) -> Run:
        def write(cx: ConversationTx) -> Run:
            self._materialize_pending(cx, plan, progress)
            # Every notification delivered so far was in this turn's request: handled (T5).
            journal.consume(cx, journal.unconsumed(cx))
            cx.append_assistant(reply.text, run_id=plan.run_id,
                                meta={"model": progress.model, **(meta or {}),
                                      **_reply_sources(cx, plan, progress)})
            if plan.lease is not None and plan.lease.deliveries:
                self.outbox.ack(cx.tx, plan.lease)
            self._settle_turn_tasks(cx, plan, progress, stopped=False)
            # A request a parent opened in this (child) conversation is answered (M16).
            answered = [relay.answer(cx, item, status="completed", text=reply.text,
                                     run_id=plan.run_id) for item in plan.inputs]
            progress.child_replied = any(answered)
            # Tasks that ended during the turn are delivered now, for the next turn.
            progress.more_work = bool(journal.deliver_due(cx))
            run = self._end_run(cx, plan, progress, RunStatus.COMPLETED, None, [])
            if cx.conversation.awaiting_person and plan.trigger is StartKind.PERSON:
                cx.update(awaiting_person=False)
            return run

        try:
            run = await self._commit(plan, progress, write)
        except (SlotLostError, CommitOutcomeUnknownError):
            raise
        except TidingsError as exc:
            # The answer did not commit: give everything back at once (S7).
            raise TurnFailed(RunStatus.FAILED, exc.code, [{"error": exc.message[:200]}]) from exc
        self._kick_relay(progress)
        return run

    async def _finish_failed(
        self, plan: TurnPlan, progress: TurnProgress, failure: TurnFailed
    ) -> Run:
        def write(cx: ConversationTx) -> Run:
            self._materialize_pending(cx, plan, progress)
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
            self._settle_turn_tasks(cx, plan, progress, stopped=failure.code == "stopped")
            if self.approvals is not None:
                self.approvals.expire_run(cx, plan.run_id)
            if failure.status is not RunStatus.NEEDS_ATTENTION:
                # The parent is told how its request ended; a run that needs attention may
                # still answer it after a retry.
                text = f"(the child's turn ended {failure.status.value}: {failure.code})"
                answered = [relay.answer(cx, item, status=failure.status.value, text=text,
                                         run_id=plan.run_id) for item in plan.inputs]
                progress.child_replied = any(answered)
            # Delivered stays, consumed does not; the error is kept with them (T5).
            kept = journal.unconsumed(cx)
            journal.keep_unconsumed(cx, kept, failure.code)
            progress.more_work = bool(journal.deliver_due(cx)) or bool(kept)
            # A stop's suppression was written by the stop itself (a person's post since then
            # has lifted it, and that stands).
            if failure.status in (RunStatus.FAILED, RunStatus.NEEDS_ATTENTION):
                cx.update(awaiting_person=True)
            return self._end_run(cx, plan, progress, failure.status, failure.code, failure.errors)

        run = await self._commit(plan, progress, write)
        self._kick_relay(progress)
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
        run = Run(
            run_id=plan.run_id, conversation_id=plan.conversation_id, trigger=plan.trigger,
            status=status, model=progress.model, failure_code=code, steps=progress.steps,
            created_at_us=plan.started_at_us, started_at_us=plan.started_at_us,
            ended_at_us=cx.now_us,
        )
        data: dict[str, Any] = {"run_public_id": plan.run_id, "status": status.value}
        if code is not None:
            data["failure_code"] = code
        if errors:
            data["errors"] = list(errors)[-8:]
            # The route spent (a model skipped as unavailable spent nothing): a retry of a
            # mail run does not renew it (M10).
            data["models_spent"] = list(dict.fromkeys(
                str(e["model"]) for e in errors
                if e.get("model") and e.get("kind") in ("retryable", "permanent")
            ))
        cx.record_event("turn_status", data, plan.run_id)
        cx.release_slot(plan.slot_token)
        # Read under the lock, before the slot is released: what it shows was committed
        # before, and whatever it misses will find the slot free.
        progress.more_work = (
            progress.more_work
            or cx.queued_count > 0
            or (cx.signal_backlog > 0 and self._ready_signals(cx))
        )
        return run

    def _ready_signals(self, cx: ConversationTx) -> bool:
        row = cx.tx.one(
            "has_ready_signals", conversation_id=cx.conversation_id, now_us=cx.now_us,
            max_attempts=self.outbox.config.max_attempts,
        )
        return bool(row and row["ready"])

    # -- compaction ---------------------------------------------------------------------------

    async def summarize(self, profile: Profile, history: Sequence[Message]) -> str:
        """One summarising model step over the history (C7's compaction)."""
        messages = [prompt_message(m) for m in history_window(history)]
        messages.append(PromptMessage("user", SUMMARY_REQUEST, meta={"kind": "compaction"}))
        request = ModelRequest(
            model=profile.model, system=profile.system, tools=(), messages=tuple(messages)
        )
        progress = TurnProgress(pending=[])
        try:
            reply = await self._call_model(request, profile, progress)
        except TurnFailed as failure:
            raise ModelError(
                ModelErrorKind.UNAVAILABLE, f"compaction failed: {failure.code}"
            ) from None
        return reply.text


SUMMARY_REQUEST = (
    "Summarise this conversation for a hand-off: the goal, what was decided, what is still "
    "open (including background work that has not reported back), and anything the next turn "
    "must not forget."
)


def _retry_profile(profile: Profile, inputs: Sequence[Input]) -> Profile:
    """A person's retry that names one of the profile's models tries it first (C8); a receipt's
    turn runs on its frozen environment (M5)."""
    for item in inputs:
        environment = item.meta.get("environment")
        if item.origin.is_kernel and isinstance(environment, dict):
            return receipt_profile(profile, environment)
    for item in reversed(inputs):
        retry = item.meta.get("retry")
        if not isinstance(retry, dict):
            continue
        if isinstance(retry.get("environment"), dict):
            # A retried mail run stays within its receipt's frozen environment, on the models
            # its first run did not spend (M10).
            profile = _unspent(receipt_profile(profile, retry["environment"]),
                               retry.get("spent", []))
        model = retry.get("model")
        if isinstance(model, str) and model in profile.models:
            return replace(profile, model=model,
                           fallbacks=tuple(m for m in profile.models if m != model))
    return profile


def _reply_sources(cx: ConversationTx, plan: TurnPlan, progress: TurnProgress) -> dict[str, Any]:
    """A supplementary reply's sender fields and ``callback_sources`` (M9): a combined report
    of several worker finals names them all and no single sender."""
    mail = [receipt_of(i, owner=cx.conversation.owner) for i in plan.inputs
            if i.origin.is_kernel and i.input_id in progress.taken]
    return combined_sources(mail).as_meta() if mail else {}


def _unspent(profile: Profile, spent: Sequence[str]) -> Profile:
    """The profile on the models not spent yet (the first left leads)."""
    left = [m for m in profile.models if m not in spent]
    if not left or left == list(profile.models):
        return profile
    return replace(profile, model=left[0], fallbacks=tuple(left[1:]))


def _chars(message: PromptMessage) -> int:
    """A message's size as a request's bound counts it: its text and its calls."""
    return len(message.content) + sum(
        len(c.name) + len(json.dumps(c.arguments, default=str)) for c in message.tool_calls
    )


def _input_message(item: Input) -> PromptMessage:
    return PromptMessage(
        "user", item.content, origin=item.origin.value,
        meta={**item.meta, "input_id": item.input_id},
    )


def _slug(code: str) -> str:
    cleaned = "".join(ch if ch.isalnum() or ch in "_.:-" else "_" for ch in code.lower())
    return cleaned if cleaned[:1].isalpha() else f"turn_{cleaned}"[:64]


__all__ = ("TurnConfig", "TurnOutcome", "TurnPlan", "TurnRunner")
