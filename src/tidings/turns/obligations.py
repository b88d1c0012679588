"""What a turn owes beyond its model loop: the turn-lifetime tasks it drains before its reply
is final (M4), the tool calls a person must approve first (L5), and the relay it kicks after
answering a parent's request (M16).

:class:`TurnObligations` is a collaborator the :class:`~tidings.turns.runner.TurnRunner`
holds and calls; it writes through the turn's :class:`~tidings.turns.writer.TurnWriter`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable, Sequence
from dataclasses import replace

from tidings.clock import to_us
from tidings.conversations.approvals import Approvals, needs_approval
from tidings.mail import child_requests, relay
from tidings.mail.door import Door
from tidings.models.base import ModelReply, ToolCall
from tidings.records.transcript import ConversationTx
from tidings.support.tracing import Tracing
from tidings.tasks import journal
from tidings.tasks.notify import is_eligible
from tidings.tools.registry import Tool, ToolOutput
from tidings.turns.calls import execute
from tidings.turns.plan import TurnChildren, TurnConfig, TurnPlan, TurnProgress, TurnTasks
from tidings.turns.writer import TurnWriter
from tidings.types import Message, Origin, Profile


class TurnObligations:
    """Task drain, approvals and the relay kick of a turn (see the module docstring)."""

    def __init__(
        self,
        writer: TurnWriter,
        config: TurnConfig,
        door: Door,
        *,
        tasks: TurnTasks | None = None,
        children: TurnChildren | None = None,
        approvals: Approvals | None = None,
        on_child_reply: Callable[[], None] | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.writer = writer
        self.tracing = tracing or Tracing()
        self.config = config
        self.door = door
        self.tasks = tasks
        self.children = children
        self.approvals = approvals
        self.on_child_reply = on_child_reply
        """Called after a turn that answered a parent's request, or delegated, committed."""

    async def synthesis_round(
        self, plan: TurnPlan, progress: TurnProgress, reply: ModelReply
    ) -> list[Message] | None:
        """Wait (bounded) for the turn's turn-lifetime tasks and the first reports of its
        turn-owned children, then hand them to the turn: the reply so far is kept as an
        interim answer and the model is asked again. None when there is nothing to tell (the
        reply is then final)."""
        keys, progress.turn_tasks = progress.turn_tasks, []
        children, progress.turn_children = progress.turn_children, []
        progress.drained += keys
        within = to_us(self.config.task_drain) / 1e6
        waits = []
        if self.tasks is not None and keys:
            waits.append(self.tasks.wait_journalled(keys, within))
        if self.children is not None and children:
            waits.append(self.children.await_replies(children, within))
        await asyncio.gather(*waits)
        return await self.writer.commit(plan, progress, functools.partial(
            self._write_synthesis, plan=plan, progress=progress, text=reply.text, keys=keys,
            children=children,
        ))

    def _write_synthesis(
        self,
        cx: ConversationTx,
        plan: TurnPlan,
        progress: TurnProgress,
        text: str,
        keys: Sequence[str],
        children: Sequence[str],
    ) -> list[Message] | None:
        self.writer.materialize_pending(cx, plan, progress)
        owed = [
            t for k in keys
            if (t := journal.get(cx, k)) is not None and not t.handed_off
            and is_eligible(replace(t.flags, handed_off=True))
        ]
        # A report not yet come stays owned by the run; at its end it becomes mail (M16).
        replies = [r for rid in children
                   if (r := child_requests.consume_in_run(cx, rid, plan.run_id)) is not None]
        if not owed and not replies:
            return None
        cx.append_assistant(text, run_id=plan.run_id,
                            meta={"model": progress.model, "step": progress.steps,
                                  "interim": True})
        joined_from = len(cx.appended)
        for task in owed:
            journal.hand_off(cx, task)
        # The notices enter through the door (``input_accepted{origin: task_result}``) and this
        # run reads them at once: they join it, they are not a new turn (M4, H1).
        journal.join(cx, self.door, plan.run_id)
        for request in replies:
            # A turn-owned spawn's first report settles here, before the reply is final, and
            # is not also mail (M16).
            cx.record_event(
                "input_accepted",
                {"origin": "child", "run_public_id": plan.run_id,
                 "task_key": request.task_key,
                 "sender_conversation_public_id": request.child_conversation_id},
                plan.run_id,
            )
            cx.append_user(relay.render(request), origin=Origin.CHILD, run_id=plan.run_id,
                           meta={"task_key": request.task_key, "request_id": request.request_id,
                                 "sender_conversation_id": request.child_conversation_id})
        return [m for m in cx.appended[joined_from:] if m.role == "user"]

    def settle_delegation(
        self, cx: ConversationTx, plan: TurnPlan, progress: TurnProgress, output: ToolOutput
    ) -> ToolOutput:
        """In the unit that records a tool's result: a turn-owned spawn becomes an obligation
        of the turn, and a result that shows a turn-owned child's first report (a spawn that
        waited, a wait) consumes it -- once, never again in this run, never as mail (M16)."""
        owned = output.meta.get("turn_child_request")
        shown = output.meta.get("consume_child_request")
        if isinstance(owned, str):
            progress.delegated = True
            if shown is None:
                progress.turn_children.append(owned)
        if not isinstance(shown, str):
            return output
        if child_requests.consume_in_run(cx, shown, plan.run_id) is not None:
            if shown in progress.turn_children:
                progress.turn_children.remove(shown)
            return output
        # Another result of this turn showed it first (two waits in one step).
        return ToolOutput(
            f"the report of task {output.meta.get('task_key', '')} was received already in "
            "this turn", meta={k: v for k, v in output.meta.items()
                                if k != "consume_child_request"},
        )

    def settle_turn_tasks(
        self, cx: ConversationTx, plan: TurnPlan, progress: TurnProgress, *, stopped: bool
    ) -> None:
        """As the turn ends: a stopped run's tasks owe nothing any more (their notifications
        are cancelled); otherwise the turn-lifetime tasks still owed go to the conversation."""
        if stopped:
            for task in journal.of_run(cx, plan.run_id):
                if not task.delivered:
                    journal.cancel(cx, task)
            return
        for key in progress.turn_tasks + progress.drained:
            owned = journal.get(cx, key)
            if owned is not None:
                journal.hand_off(cx, owned)

    def needs_approval(
        self, profile: Profile, offered: Sequence[Tool], call: ToolCall
    ) -> bool:
        tool = next((t for t in offered if t.name == call.name), None)
        return self.approvals is not None and tool is not None and (
            tool.needs_approval or needs_approval(profile.approval_mode, read_only=tool.read_only)
        )

    async def execute_approved(
        self, plan: TurnPlan, progress: TurnProgress, offered: Sequence[Tool], call: ToolCall,
        approval_id: str,
    ) -> ToolOutput:
        """Hold the call until a person decides (L5), lending the turn's place in the process
        meanwhile; run it only through the fence."""
        assert self.approvals is not None
        approvals = self.approvals
        lend = progress.for_a_person
        async with lend() if lend is not None else contextlib.nullcontext():
            approval = await approvals.wait(approval_id)
        meta = {"approval_id": approval_id, "approval": approval.status}
        if approval.status == "denied":
            return ToolOutput(f"denied by {approval.decided_by}: the tool was not run",
                              is_error=True, meta=meta)
        if approval.status != "approved":
            return ToolOutput(f"approval {approval.status}: the tool was not run",
                              is_error=True, meta=meta)
        applied = await self.writer.commit(
            plan, progress, lambda cx: approvals.apply(cx, approval_id, plan.run_id)
        )
        if not applied:
            return ToolOutput("this approval was applied already: nothing is applied twice",
                              is_error=True, meta=meta)
        output = await execute(plan, offered, call, self.tracing, self.tasks)
        return replace(output, meta={**output.meta, "approval_id": approval_id,
                                     "approval": "applied"})

    def kick_relay(self, progress: TurnProgress) -> None:
        # A turn that delegated leaves what it did not consume to the relay as it ends.
        if (progress.child_replied or progress.delegated) and self.on_child_reply is not None:
            self.on_child_reply()


__all__ = ("TurnObligations",)
