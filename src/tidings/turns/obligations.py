"""What a turn owes beyond its model loop: the turn-lifetime tasks it drains before its reply
is final (M4), the tool calls a person must approve first (L5), and the relay it kicks after
answering a parent's request (M16).

:class:`TurnObligations` is a part of :class:`~tidings.turns.runner.TurnRunner`, kept apart so
that the loop reads on its own; it uses the runner's commit and tool execution.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

from tidings.approvals import Approvals, needs_approval
from tidings.clock import to_us
from tidings.models.base import ModelReply, ToolCall
from tidings.tasks import journal
from tidings.tasks.notify import is_eligible
from tidings.tools.registry import Tool, ToolOutput
from tidings.transcript import ConversationTx
from tidings.turns.plan import TurnConfig, TurnPlan, TurnProgress, TurnTasks
from tidings.types import Message, Profile

T = TypeVar("T")


class TurnObligations:
    """Task drain, approvals and the relay kick of a turn (see the module docstring)."""

    config: TurnConfig
    tasks: TurnTasks | None
    approvals: Approvals | None
    on_child_reply: Callable[[], None] | None

    if TYPE_CHECKING:

        async def _commit(
            self, plan: TurnPlan, progress: TurnProgress, write: Callable[[ConversationTx], T]
        ) -> T: ...

        async def _execute(
            self, plan: TurnPlan, offered: Sequence[Tool], call: ToolCall
        ) -> ToolOutput: ...

        def _materialize_pending(
            self, cx: ConversationTx, plan: TurnPlan, progress: TurnProgress
        ) -> None: ...

    async def _synthesis_round(
        self, plan: TurnPlan, progress: TurnProgress, reply: ModelReply
    ) -> list[Message] | None:
        """Wait (bounded) for the turn's turn-lifetime tasks, then hand their notifications
        to the turn: the reply so far is kept as an interim answer and the model is asked
        again. None when there is nothing to tell (the reply is then final)."""
        keys, progress.turn_tasks = progress.turn_tasks, []
        progress.drained += keys
        if self.tasks is not None:
            await self.tasks.wait_journalled(keys, to_us(self.config.task_drain) / 1e6)
        return await self._commit(plan, progress, functools.partial(
            self._write_synthesis, plan=plan, progress=progress, text=reply.text, keys=keys
        ))

    def _write_synthesis(
        self,
        cx: ConversationTx,
        plan: TurnPlan,
        progress: TurnProgress,
        text: str,
        keys: Sequence[str],
    ) -> list[Message] | None:
        self._materialize_pending(cx, plan, progress)
        owed = [
            t for k in keys
            if (t := journal.get(cx, k)) is not None and not t.handed_off
            and is_eligible(replace(t.flags, handed_off=True))
        ]
        if not owed:
            return None
        cx.append_assistant(text, run_id=plan.run_id,
                            meta={"model": progress.model, "interim": True})
        joined_from = len(cx.appended)
        for task in owed:
            # Announced as accepted input of this run -- without an input id: not a new turn.
            cx.record_event(
                "input_accepted",
                {"origin": "task_result", "run_public_id": plan.run_id,
                 "task_key": task.task_key},
                plan.run_id,
            )
            journal.hand_off(cx, task)
        journal.deliver_due(cx, during_run=plan.run_id)
        return [m for m in cx.appended[joined_from:] if m.role == "user"]

    def _settle_turn_tasks(
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

    def _needs_approval(
        self, profile: Profile, offered: Sequence[Tool], call: ToolCall
    ) -> bool:
        tool = next((t for t in offered if t.name == call.name), None)
        return self.approvals is not None and tool is not None and (
            tool.needs_approval or needs_approval(profile.approval_mode, read_only=tool.read_only)
        )

    async def _execute_approved(
        self, plan: TurnPlan, progress: TurnProgress, offered: Sequence[Tool], call: ToolCall,
        approval_id: str,
    ) -> ToolOutput:
        """Hold the call until a person decides (L5); run it only through the fence."""
        assert self.approvals is not None
        approvals = self.approvals
        approval = await approvals.wait(approval_id)
        meta = {"approval_id": approval_id, "approval": approval.status}
        if approval.status == "denied":
            return ToolOutput(f"denied by {approval.decided_by}: the tool was not run",
                              is_error=True, meta=meta)
        if approval.status != "approved":
            return ToolOutput(f"approval {approval.status}: the tool was not run",
                              is_error=True, meta=meta)
        applied = await self._commit(
            plan, progress, lambda cx: approvals.apply(cx, approval_id, plan.run_id)
        )
        if not applied:
            return ToolOutput("this approval was applied already: nothing is applied twice",
                              is_error=True, meta=meta)
        output = await self._execute(plan, offered, call)
        return replace(output, meta={**output.meta, "approval_id": approval_id,
                                     "approval": "applied"})

    def _kick_relay(self, progress: TurnProgress) -> None:
        if progress.child_replied and self.on_child_reply is not None:
            self.on_child_reply()


__all__ = ("TurnObligations",)
