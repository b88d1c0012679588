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
import functools
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from typing import TypeVar

from tidings.clock import Clock
from tidings.conversations.approvals import Approvals
from tidings.errors import ModelSampleError
from tidings.feed import FeedHub
from tidings.mail import queue
from tidings.mail.door import Door
from tidings.mcp import reports as mcp_reports
from tidings.models.base import (
    Model,
    ModelError,
    ModelErrorKind,
    ModelReply,
    ModelRequest,
    PromptMessage,
    ToolCall,
)
from tidings.records.outbox import Outbox
from tidings.records.results import Results
from tidings.records.transcript import ConversationTx
from tidings.store import Store
from tidings.support.metrics import Metrics
from tidings.support.tracing import Tracing
from tidings.tasks import journal
from tidings.tools.registry import (
    ToolOutput,
    ToolRegistry,
)
from tidings.turns import spans
from tidings.turns.calls import execute, kept
from tidings.turns.context import history_window, prompt_message, runtime_facts
from tidings.turns.ending import TurnEnding
from tidings.turns.fallback import Fallback
from tidings.turns.fallback import discard as _discard
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
from tidings.turns.request import fit_history, input_message, retry_profile
from tidings.turns.writer import TurnWriter
from tidings.types import (
    Message,
    Profile,
    Run,
    RunStatus,
    StartKind,
)

log = logging.getLogger("tidings.turns")
T = TypeVar("T")


class TurnRunner:
    """Runs turns for the coordinator; holds no per-conversation state between turns.

    Its collaborators, made from what its constructor is given: the :class:`TurnWriter` every
    unit of a turn commits through, the :class:`TurnObligations` a turn settles (its tasks,
    its children, its approvals) and the :class:`TurnEnding` that commits its end.
    """

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
        door: Door | None = None,
        tracing: Tracing | None = None,
        feed: FeedHub | None = None,
        results: Callable[[], Results | None] | None = None,
    ) -> None:
        self.store = store
        self.results: Callable[[], Results | None] = results or (lambda: None)
        """Where a tool result past the cut is kept whole (none without a master key)."""
        self.tracing = tracing or Tracing()
        """Spans of turns, model calls and tool calls (the global tracer provider's by default)."""
        self.feed = feed
        """Where the answers being written go, piece by piece, to watchers."""
        self.door = door or Door(store, clock)
        """The door task notifications are delivered through (kernel mail, M1)."""
        self.approvals = approvals
        self.metrics = metrics
        self.outbox = outbox
        self.models = models
        self.tools = tools
        self.clock = clock
        self.config = config or TurnConfig()
        self._rng = rng or random.Random()
        self.fallback = Fallback(models, self.config, clock, metrics=metrics,
                                 tracing=self.tracing, feed=feed, rng=self._rng)
        """The models asked in order, and those cooling down (B9): shared by every turn."""
        self.history = HistoryCache(store, limit=self.config.history_messages)
        self.writer = TurnWriter(store, clock, self.history)
        self.obligations = TurnObligations(
            self.writer, self.config, self.door, tasks=tasks, children=children,
            approvals=approvals, on_child_reply=on_child_reply, tracing=self.tracing,
        )
        self.ending = TurnEnding(
            self.writer, self.obligations, outbox, self.door, tasks=tasks, approvals=approvals
        )

    # -- the loop -----------------------------------------------------------------------------

    async def run_turn(
        self, plan: TurnPlan, *, stop_reason: Callable[[], str | None],
        released: Callable[[], None] | None = None,
        for_a_person: Callable[[], AbstractAsyncContextManager[None]] | None = None,
    ) -> TurnOutcome:
        """Run the model loop to a committed answer, or to a committed failure or stop.

        ``stop_reason`` tells, after a cancellation, why the turn was cancelled (``stopped``
        by a person, ``shutdown``, ``slot_lost``); None means the caller's own cancellation,
        which is re-raised after the turn's state is committed. ``released`` is called once
        the unit that ends the turn (and gives its slot back) committed, before whatever that
        commit wakes runs. ``for_a_person``: see :attr:`TurnProgress.for_a_person`.
        """
        progress = TurnProgress(pending=list(plan.inputs), taken={i.input_id for i in plan.inputs},
                                released=released, for_a_person=for_a_person)
        with spans.turn(self.tracing, plan) as span:
            progress.span = span
            outcome = await self._run_turn(plan, progress, stop_reason)
            spans.turn_ended(span, outcome.run)
            return outcome

    async def _run_turn(
        self, plan: TurnPlan, progress: TurnProgress, stop_reason: Callable[[], str | None],
    ) -> TurnOutcome:
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
            return progress.outcome(await self.ending.finish_failed(plan, progress, stopped))
        try:
            run = await self._loop(plan, progress)
        except TurnFailed as failed:
            _discard(progress, failed.code)
            if plan.trigger is StartKind.MAIL and failed.code == "model_permanent":
                # The model refused the receipt itself: the mail completes as a message with
                # what was received, not a retryable run (M10).
                run = await self.ending.finish_refused(plan, progress, failed)
            else:
                run = await self.ending.finish_failed(plan, progress, failed)
        except asyncio.CancelledError:
            reason = stop_reason()
            _discard(progress, reason or "cancelled")
            if reason == "slot_lost":
                raise  # another holder owns the conversation now; write nothing
            stop = TurnFailed(RunStatus.STOPPED, reason or "shutdown", [])
            finishing = asyncio.ensure_future(self.ending.finish_failed(plan, progress, stop))
            try:
                await asyncio.shield(finishing)
            except asyncio.CancelledError:
                await finishing
            if reason is None:
                raise
            run = finishing.result()
        except Exception:
            _discard(progress, "failed")
            raise
        if self.metrics is not None and run.ended_at_us is not None:
            self.metrics.observe(
                "tidings_turn_seconds", "Turn latency, from the slot taken to the run's end.",
                (run.ended_at_us - plan.started_at_us) / 1e6,
                {"status": run.status.value, "trigger": plan.trigger.value},
            )
        return progress.outcome(run)

    async def _loop(self, plan: TurnPlan, progress: TurnProgress) -> Run:
        profile = retry_profile(plan.profile, plan.inputs)
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
        messages, cut = fit_history(
            messages, profile=profile, inputs=plan.inputs, total=total,
            bounds=(self.config.history_budget_chars,
                    getattr(self.models.get(profile.model), "context_chars", None)),
        )
        if cut is not None:
            progress.trimmed = cut
        inputs = plan.inputs
        if plan.trigger is StartKind.MAIL and len(inputs) > 1 and (
            progress.trimmed is not None or self.models.get(profile.model) is None
        ):
            # A batch shares a reply only on the uncut history and a model that can open it;
            # else the head goes alone and the rest stay queued for their own turns (M8).
            inputs = inputs[:1]
            progress.pending = list(inputs)
            progress.taken = {i.input_id for i in inputs}
        messages += [input_message(i) for i in inputs]
        if plan.notice is not None:
            messages.append(PromptMessage("user", plan.notice, meta=dict(plan.notice_meta)))
        facts = runtime_facts(plan.lease.deliveries) if plan.lease is not None else None
        tools = tuple(t.spec for t in offered)
        suffix = (facts.content,) if facts is not None else ()
        while True:
            if progress.steps >= self.config.max_steps:
                raise TurnFailed(RunStatus.FAILED, "max_steps_exceeded", [])
            progress.steps += 1
            request = ModelRequest(
                model=profile.model, system=profile.system, tools=tools,
                messages=tuple(messages), suffix=suffix,
            )
            reply = await self._call_model(request, profile, progress, plan=plan)
            if not reply.tool_calls:
                if progress.turn_tasks or progress.turn_children:
                    # The reply is not final while its turn-lifetime tasks or its turn-owned
                    # children's first reports are owed (M4, M16).
                    joined = await self.obligations.synthesis_round(plan, progress, reply)
                    if joined is not None:
                        messages.append(PromptMessage("assistant", reply.text))
                        messages += [prompt_message(m) for m in joined]
                        continue
                return await self.ending.finish_completed(plan, progress, reply)
            calls = list(reply.tool_calls)
            held = {
                c.call_id: Approvals.new_id() for c in calls
                if self.obligations.needs_approval(profile, offered, c)
            }

            await self.writer.commit(plan, progress, functools.partial(
                self._write_calls, plan=plan, progress=progress, text=reply.text, calls=calls,
                held=held,
            ))
            progress.open_calls = calls
            messages.append(PromptMessage("assistant", reply.text, tool_calls=tuple(calls)))
            obligations = self.obligations
            outputs = list(await asyncio.gather(*(
                execute(plan, offered, call, self.tracing, obligations.tasks,
                        functools.partial(self._sample, profile=profile, progress=progress))
                if call.call_id not in held
                else obligations.execute_approved(plan, progress, offered, call,
                                                  held[call.call_id])
                for call in calls
            )))
            joined = await self.writer.commit(plan, progress, functools.partial(
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

    # -- the model ----------------------------------------------------------------------------

    async def _call_model(
        self, request: ModelRequest, profile: Profile, progress: TurnProgress,
        plan: TurnPlan | None = None,
    ) -> ModelReply:
        """Ask each model of the profile in turn (:class:`~tidings.turns.fallback.Fallback`).

        With a ``plan``, each call streams its text to the feed as a draft of this step
        (B1): sealed when the reply is in (it commits next), discarded when the call failed.
        """
        return await self.fallback.call(request, profile, progress, plan)

    async def _sample(self, request: ModelRequest, *, profile: Profile,
                      progress: TurnProgress) -> ModelReply:
        """A tool's request for a completion (an MCP server's sampling), answered by the
        profile's models as a step is, its spend counted on the run; no draft reaches the
        feed. Every model failing is a :class:`~tidings.errors.TidingsError`."""
        try:
            return await self.fallback.call(replace(request, model=profile.models[0]), profile,
                                            progress)
        except TurnFailed as failed:
            raise ModelSampleError(failed.code) from None

    # -- commits ------------------------------------------------------------------------------

    def _write_calls(
        self,
        cx: ConversationTx,
        plan: TurnPlan,
        progress: TurnProgress,
        text: str,
        calls: Sequence[ToolCall],
        held: Mapping[str, str],
    ) -> None:
        self.writer.materialize_pending(cx, plan, progress)
        cx.append_assistant(text, tool_calls=calls, run_id=plan.run_id,
                            meta={"model": progress.model, "step": progress.steps})
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
        outputs: list[ToolOutput],
    ) -> list[Message]:
        """The step's results, then -- the safe point -- the task notifications that are due
        and the steers (M3, T4). Returns the user-role messages that joined."""
        for index, output in enumerate(outputs):
            if output.whole is not None:
                # Past the cut: the whole result is kept, in this unit, as an envelope (the
                # model's prompt reads the same note: ``outputs`` is the step's own list).
                results = self.results()
                ref = None if results is None else results.seal(
                    cx.tx, plan.conversation_id, output.whole.encode("utf-8", "replace"),
                    run_id=plan.run_id)
                outputs[index] = kept(output, None if ref is None or ref.status == "failed"
                                      else ref.result_id)
        outputs = [self.obligations.settle_delegation(cx, plan, progress, o) for o in outputs]
        for call, output in zip(progress.open_calls, outputs, strict=True):
            cx.append_tool_result(
                call.call_id, output.content, tool_name=call.name, run_id=plan.run_id,
                meta={"is_error": output.is_error, **output.meta},
            )
            if output.is_error:  # an MCP server that was not there: the run's events say so
                mcp_reports.record_call_failure(cx, plan.run_id, call.call_id, call.name,
                                                output.meta)
        joined_from = len(cx.appended)
        for output in outputs:
            # A result that showed a task's end to the model: no notification follows (T8).
            reported = output.meta.get("reported_task_key")
            if isinstance(reported, str) and (task := journal.get(cx, reported)) is not None:
                journal.mark_reported(cx, task)
        for output in outputs:
            task_key = output.meta.get("task_key")
            if isinstance(task_key, str) and (task := journal.get(cx, task_key)) is not None:
                journal.mark_committed(cx, task)
                if not task.handed_off and task_key not in progress.turn_tasks:
                    progress.turn_tasks.append(task_key)
        # Due notifications enter through the door and this run reads them here (T4, H1).
        journal.join(cx, self.door, plan.run_id)
        steers = [
            s for s in queue.queued_steers(cx, self.config.inputs_per_turn)
            if s.input_id not in progress.taken
        ]
        for steer in steers:
            queue.materialize(cx, steer, plan.run_id)
        return [m for m in cx.appended[joined_from:] if m.role == "user"]

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


__all__ = ("TurnConfig", "TurnOutcome", "TurnPlan", "TurnRunner")
