"""The conversation's slot (C3, C9, S5): taking it, recovering from a dead holder, keeping it.

Taking the slot is one unit of work under the conversation's lock (:func:`begin`, over a
:class:`~tidings.records.transcript.ConversationTx` the caller saves): it reads the queued
inputs, the goal, the suppression and attention flags and the ready signals, decides with the pure
:func:`~tidings.support.policy.decide_start` (C3), and -- only if a turn starts -- writes the
run, the slot lease and the claim of the signals in the same transaction. A start that yields
records why; a start that yields writes nothing else.

The slot is a fenced lease on the conversation row, so it is cluster-wide on PostgreSQL (C9): a
holder that dies loses it when the lease expires, and the next unit that finds it expired
answers the dead turn's open tool calls ``outcome_unknown`` (:func:`recover_interrupted`) before
anything else -- nothing is replayed. While a turn runs, :func:`keep` extends the lease and
reports the moment the turn must stop: its slot was lost, or a stop was asked from anywhere.
A compaction takes the same slot through its own gate (:func:`take_for_compaction`): refused
while a turn holds it or a start is queued. A turn's units are fenced by the slot's token and
its last unit releases it (the row primitives are the locked conversation's slot,
:class:`tidings.records.transcript.Slot`: ``take``, ``require``, ``release``); a person's stop
asks the holder to let go (:func:`tidings.mail.stop.request_stop`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import secrets
from dataclasses import dataclass
from typing import Any

from tidings.clock import Clock, to_us
from tidings.conversations.approvals import expire_run_approvals
from tidings.conversations.questions import expire_run_questions
from tidings.errors import CompactionRefusedError, TidingsError, UnknownConversationError
from tidings.mail import queue
from tidings.mail.batching import mail_batch
from tidings.mail.door import Door
from tidings.records.outbox import Outbox
from tidings.records.rows import conversation_from_row, input_from_row
from tidings.records.transcript import ConversationTx
from tidings.store import Row, Store, Tx
from tidings.support.policy import StartDecision, StartState, decide_start
from tidings.tasks import journal
from tidings.tasks.notify import is_notice
from tidings.turns.plan import TurnConfig, TurnPlan
from tidings.types import (
    Conversation,
    ConversationId,
    ConversationStatus,
    Input,
    Lease,
    Message,
    Origin,
    RunId,
    RunStatus,
    StartKind,
    new_id,
)

log = logging.getLogger("tidings.coordinator")  # the keeper logs where it always has


@dataclass(frozen=True, slots=True)
class Begin:
    """The answer of the slot-taking unit: a plan to run, or the decision to yield."""

    plan: TurnPlan | None
    decision: StartDecision
    slot_deadline_us: int | None = None
    """When the slot a yield found busy is due to be free again (None: not busy)."""
    settled_ns: int | None = None
    """A yield that nothing would start: when its unit began (``time.monotonic_ns``), before
    it read that under the lock -- as :func:`would_start` would have read it then."""


# -- taking the slot ---------------------------------------------------------------------------


def begin(
    cx: ConversationTx, kinds: frozenset[StartKind], *, record: bool,
    config: TurnConfig, outbox: Outbox, door: Door, instance_id: str,
) -> Begin:
    """Decide a start under the lock and, if a turn starts, take the slot, write the run and
    claim the signals. The caller saves ``cx``.

    ``record`` False keeps the yields out of the event log (a wake-up's or a re-check's).
    """
    slot_free = _recover_expired(cx)
    # A safe point with no turn running: notifications still due (a full queue, a crash) are
    # delivered now, and the turn that starts reads them first (T4, T6, M2). With the slot
    # held, what this unit's own writes made due is accepted all the same (M13); the holder
    # reads it at its next safe point.
    delivered = (journal.deliver_due(cx, door) if slot_free
                 else journal.accept_due(cx, door))
    inputs, state = start_state(
        cx.tx, cx.row, slot_free, cx.now_us, inputs_per_turn=config.inputs_per_turn,
        max_attempts=outbox.config.max_attempts, cx=cx,
    )
    if delivered or (slot_free and cx.notified):
        state = dataclasses.replace(state, notifications=True)
    decision = decide(cx.tx, cx.conversation_id, state, kinds,
                      direct=any(task.direct for task in delivered))
    if record:
        for kind, reason in decision.yielded:
            cx.record_event("turn_yielded", {"start": kind.value, "reason": reason})
    trigger = decision.trigger
    if trigger is None:
        _, deadline, _ = cx.slot.holder()
        return Begin(None, decision, deadline, cx.locked_ns)
    run_id = RunId(new_id("run"))
    deadline_us = cx.now_us + to_us(config.slot_ttl)
    lease = (
        outbox.claim_in(cx.tx, cx.conversation_id, deadline_us=deadline_us, owner=run_id)
        if state.ready_signals else None
    )
    if trigger is StartKind.WAKE and not state.notifications and (
        lease is None or not lease.deliveries
    ):
        # Another claimer (or the budget) took them: the wake-up was stale (C4).
        return Begin(None, StartDecision(None, "nothing_to_do"), None)
    token = _take(cx, run_id, trigger, deadline_us, instance_id)
    notices, taken = _read_inputs(cx, trigger, inputs, run_id)
    cx.record_event(
        "turn_status",
        {"run_public_id": run_id, "status": "running", "trigger": trigger.value,
         "inputs": [i.input_id for i in (*notices, *taken)],
         "signals": 0 if lease is None else len(lease.deliveries)},
        run_id,
    )
    notice, notice_meta = _goal_notice(trigger, cx.conversation)
    plan = TurnPlan(
        conversation_id=ConversationId(cx.conversation_id),
        run_id=run_id,
        trigger=trigger,
        slot_token=token,
        profile=cx.conversation.profile,
        inputs=tuple(taken),
        started_at_us=cx.now_us,
        history_start_seq=int(cx.row["history_start_seq"]),
        last_message_seq=int(cx.row["last_message_seq"]),
        lease=_held(lease),
        notice=notice,
        notice_meta=notice_meta,
        appended=tuple(cx.appended),
    )
    return Begin(plan, decision, deadline_us)


def _recover_expired(cx: ConversationTx) -> bool:
    """Whether the slot is free; a holder whose lease expired (its process died or stalled)
    is recovered from first, before anyone else writes, whether or not a turn starts now."""
    slot_free = cx.slot.free()
    token_held, _, _ = cx.slot.holder()
    if slot_free and token_held is not None:
        recover_interrupted(cx)
        cx.slot.release(token_held)
    return slot_free


def _take(
    cx: ConversationTx, run_id: RunId, trigger: StartKind, deadline_us: int, instance_id: str
) -> str:
    """Write the running run and take the slot for it; returns the slot's fencing token."""
    token = secrets.token_hex(16)
    cx.tx.run_later(
        "insert_run", run_id=run_id, conversation_id=cx.conversation_id,
        trigger=trigger.value, status=RunStatus.RUNNING.value,
        instance_id=instance_id, now_us=cx.now_us,
    )
    cx.slot.take(token, deadline_us, instance_id, run_id)
    return token


def _read_inputs(
    cx: ConversationTx, trigger: StartKind, inputs: list[Input], run_id: RunId
) -> tuple[list[Input], list[Input]]:
    """The queued task notifications, read here, and the other inputs the run takes.

    Whatever starts, the run reads the notifications first, in this unit -- the kernel's rows
    come first (M2), and the notice is in the transcript before the model sees it (T4, T6).
    The other inputs are read at the run's first commit: all of them for a person's or an
    agent's turn, a batch for a mail turn, none for the others.
    """
    notices = [i for i in inputs if is_notice(i)]
    others = [i for i in inputs if not is_notice(i)]
    journal.read(cx, notices, run_id)
    taken = others if trigger in (StartKind.PERSON, StartKind.AGENT) else []
    if trigger is StartKind.MAIL:
        # Up to 16 contiguous, compatible receipts share one supplementary reply (M8).
        taken = mail_batch(others, owner=cx.conversation.owner)
    return notices, taken


def _goal_notice(trigger: StartKind, c: Conversation) -> tuple[str | None, dict[str, Any]]:
    """The kernel's prompt of a goal checkpoint (none for other triggers)."""
    if trigger is not StartKind.GOAL:
        return None, {}
    return (
        f"Goal checkpoint. Continue working toward the goal: {c.goal_text or ''}",
        {"kind": "goal_checkpoint"},
    )


def _held(lease: Lease | None) -> Lease | None:
    """The signal lease the turn carries: only one that holds deliveries."""
    return lease if lease is not None and lease.deliveries else None


# -- what a start decision reads ---------------------------------------------------------------


def start_state(
    tx: Tx, row: Row, slot_free: bool, now_us: int, *, inputs_per_turn: int,
    max_attempts: int, cx: ConversationTx | None = None,
) -> tuple[list[Input], StartState]:
    """What a start decision reads: the queued inputs (read order) and the flags.

    The conversation row's counters say whether there is anything to read at all, so an idle
    conversation's check is one statement; under the lock (``cx``), inputs the unit wrote
    itself -- a post, a notice -- are not read back.
    """
    c = conversation_from_row(row)
    inputs: list[Input] = []
    ready = False
    if slot_free and cx is not None:
        inputs = queue.queued_inputs(cx, inputs_per_turn)
    elif slot_free and int(row["queued_inputs"]) > 0:
        rows = tx.all("queued_inputs", conversation_id=c.conversation_id, limit=inputs_per_turn)
        inputs = [input_from_row(r) for r in rows]
    if slot_free and int(row.get("signal_backlog") or 0) > 0:
        ready = ready_signals(tx, c.conversation_id, now_us, max_attempts=max_attempts)
    return inputs, _state(
        c, inputs, slot_free=slot_free, ready_signals=ready,
        notifications=slot_free and bool(row.get("unconsumed_notifications")),
    )


def _state(
    c: Conversation, inputs: list[Input], *, slot_free: bool, ready_signals: bool,
    notifications: bool,
) -> StartState:
    return StartState(
        status=c.status,
        goal_status=c.goal_status,
        suppressed=c.suppressed,
        awaiting_person=c.awaiting_person,
        slot_free=slot_free,
        person_inputs=any(i.origin is Origin.PERSON for i in inputs),
        agent_inputs=any(i.origin is Origin.AGENT for i in inputs),
        # A task's notification is read by whichever turn starts next; on its own it wakes the
        # conversation as a notification does (L3, L4), not as a receipt's mail turn.
        kernel_inputs=any(i.origin.is_kernel and not is_notice(i) for i in inputs),
        ready_signals=ready_signals,
        notifications=notifications,
    )


def start_queued(cx: ConversationTx, *, inputs_per_turn: int) -> bool:
    """Whether a queued input would start a turn now, as the slot-taking unit would decide it
    (C7's "a start is queued"). A person's or an agent's input would; kernel mail held back --
    by a stop's suppression, a person's awaited word, a paused or blocked goal (a task's
    notice), or because only continuation-started work's notices wait (L3) -- would not:
    nothing starts for it until that changes, so it is no queued start."""
    inputs = queue.queued_inputs(cx, inputs_per_turn)
    if not inputs:
        return False
    state = _state(cx.conversation, inputs, slot_free=True, ready_signals=False,
                   notifications=any(is_notice(i) for i in inputs))
    return decide(cx.tx, cx.conversation_id, state, frozenset()).trigger is not None


def decide(
    tx: Tx, conversation_id: str, state: StartState, kinds: frozenset[StartKind],
    *, direct: bool = False,
) -> StartDecision:
    """:func:`decide_start`, then L3's bound: a wake-up that only notifications of tasks begun
    by continuation-started work would answer starts nothing -- they wait for the next direct
    turn, so work cannot wake the agent recursively. ``direct``: the caller knows a direct
    turn's notification waits unconsumed (it delivered one in this unit), so nothing is read."""
    decision = decide_start(state, kinds)
    if decision.trigger is StartKind.WAKE and not state.ready_signals and not direct:
        row = tx.one("direct_notifications", conversation_id=conversation_id)
        if not (row and row["direct"]):
            return StartDecision(None, "continuation_started", tuple(
                (k, "continuation_started") for k in sorted(kinds) if k.automatic
            ))
    return decision


def ready_signals(tx: Tx, conversation_id: str, now_us: int, *, max_attempts: int) -> bool:
    """Whether a signal of the conversation is ready to be claimed now."""
    row = tx.one(
        "has_ready_signals", conversation_id=conversation_id, now_us=now_us,
        max_attempts=max_attempts,
    )
    return bool(row and row["ready"])


def would_start(
    tx: Tx, conversation_id: str, now_us: int, *, inputs_per_turn: int, max_attempts: int
) -> bool:
    """Whether a re-check would start a turn now (read-only: no lock, nothing written)."""
    row = tx.one("get_conversation", conversation_id=conversation_id)
    if row is None:
        return False
    deadline = row["slot_deadline_us"]
    slot_free = row["slot_token"] is None or deadline is None or deadline <= now_us
    _, state = start_state(
        tx, row, slot_free, now_us, inputs_per_turn=inputs_per_turn, max_attempts=max_attempts
    )
    return decide(tx, conversation_id, state, frozenset()).trigger is not None


# -- a dead holder -----------------------------------------------------------------------------


def recover_interrupted(cx: ConversationTx) -> int:
    """Close what a dead holder of the slot left open; runs in the unit that takes the slot.

    Its open tool calls are answered ``outcome_unknown`` (the tool may or may not have acted;
    it is never run again, S9) and its run is failed with ``interrupted``. Returns how many
    calls were answered.
    """
    answered = 0
    calls: dict[str, set[str]] = {}
    for call in cx.open_tool_calls():
        calls.setdefault(str(call["run_id"]), set()).add(str(call["call_id"]))
        cx.append_tool_result(
            call["call_id"],
            "outcome_unknown: the runtime stopped while this tool was running; it was not "
            "run again and whether it took effect is unknown",
            tool_name=call["name"],
            run_id=call["run_id"],
            meta={"status": "outcome_unknown", "is_error": True},
        )
        answered += 1
    for run_id, call_ids in calls.items():
        journal.commit_calls(cx, run_id, call_ids)  # a task such a call started is still told
    _, _, prior = cx.slot.holder()
    if prior is not None and not prior.startswith("compaction:"):
        _fail_interrupted(cx, prior)
    return answered


def _fail_interrupted(cx: ConversationTx, run_id: str) -> None:
    """End the dead holder's run: failed ``interrupted``, its approvals expired, its tasks
    handed to the conversation."""
    if cx.tx.execute(
        "finish_run", run_id=run_id, status=RunStatus.FAILED.value, failure_code="interrupted",
        model=None, steps=0, now_us=cx.now_us,
    ):
        cx.record_event(
            "turn_status",
            {"run_public_id": run_id, "status": "failed", "failure_code": "interrupted"},
            run_id,
        )
    expire_run_approvals(cx, run_id)  # a held call died with its turn: no late decision
    expire_run_questions(cx, run_id)  # nor a late answer to what its calls asked
    # The turn that owned its turn-lifetime tasks is over: their notifications go to the
    # conversation (delivered by the caller's unit at the safe point it reaches).
    for task in journal.of_run(cx, run_id):
        journal.hand_off(cx, task)


# -- keeping the slot --------------------------------------------------------------------------


def take_for_compaction(
    cx: ConversationTx, token: str, owner: str | None, *, config: TurnConfig, instance_id: str
) -> tuple[Conversation, list[Message]]:
    """The compaction's gate (C7): take the slot for a compaction and read the history it
    summarises.

    Refused while the slot is held or a queued input would start a turn; kernel mail held
    back (a task's notice while the goal is paused, mail while a stop suppresses continuation)
    is no queued start, and stays queued for the turn that reads it after the summary. A dead
    holder is recovered from first. No keeper extends this lease while the model summarises,
    so it is four times a turn's.
    """
    c = cx.conversation
    if c.status is ConversationStatus.TOMBSTONED or (owner is not None and c.owner != owner):
        raise UnknownConversationError(cx.conversation_id)
    if not cx.slot.free():
        raise CompactionRefusedError(cx.conversation_id, "a turn is active")
    if start_queued(cx, inputs_per_turn=config.inputs_per_turn):
        raise CompactionRefusedError(cx.conversation_id, "a start is queued")
    recover_interrupted(cx)
    deadline = cx.now_us + to_us(config.slot_ttl) * 4
    cx.slot.take(token, deadline, instance_id, f"compaction:{token[:8]}")
    return c, cx.history(config.history_messages * 5)


def keep_interval_s(config: TurnConfig) -> float:
    """How often the slot is extended while a turn runs: every third of its lease (seconds)."""
    return to_us(config.slot_ttl) / 3 / 1e6


async def keep(
    store: Store, outbox: Outbox, clock: Clock, plan: TurnPlan, *, config: TurnConfig,
    first_wait: bool = True,
) -> str:
    """Extend the slot (and the signal lease) every third of its lease while the turn runs.

    Returns why the turn must stop -- ``slot_lost`` (another holder may have it) or
    ``stopped`` (asked from any process); otherwise runs until cancelled. A store fault only
    skips one extension: the lease outlives two of them. ``first_wait`` False extends at once
    (the caller waited the first third already).
    """
    ttl_us = to_us(config.slot_ttl)
    interval = keep_interval_s(config)
    while True:
        if first_wait:
            await clock.sleep(interval)
        first_wait = True
        now = clock.now_us()
        try:
            rows = await store.transact_query(
                "extend_slot", route=plan.conversation_id,
                conversation_id=plan.conversation_id, token=plan.slot_token,
                deadline_us=now + ttl_us, now_us=now,
            )
        except TidingsError as exc:
            log.warning("could not extend the slot of %s: %s", plan.conversation_id, exc)
            continue
        if not rows:
            return "slot_lost"
        if rows[0]["stop_requested"]:
            return "stopped"
        if plan.lease is not None:
            with contextlib.suppress(TidingsError):
                await outbox.extend(plan.lease, lease_ttl=config.slot_ttl)


__all__ = (
    "Begin",
    "begin",
    "decide",
    "keep",
    "keep_interval_s",
    "ready_signals",
    "recover_interrupted",
    "start_queued",
    "start_state",
    "take_for_compaction",
    "would_start",
)
