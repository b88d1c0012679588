"""Operations: runtime actions with a lifecycle -- accepted, then completed, failed or
outcome_unknown (SPEC S9).

The transitions are plain functions over a :class:`~tidings.store.Tx`: call them inside the
caller's unit of work, so an operation is accepted (or settled) with the writes it explains,
or not at all.

Guarantees:

- an operation is accepted by a running instance, before anything external runs; one whose
  instance goes before settling it becomes outcome_unknown, and is never replayed;
- one idempotency key per owner accepts once; a repeat returns the first operation;
- ``accepted`` is the only state that changes: settling a settled operation is refused with
  :class:`OperationSettledError`, so two instances racing settle it once;
- an outcome is bounded JSON, a failure code a non-sensitive slug.
"""

from __future__ import annotations

import json

from tidings.errors import InstanceNotRunningError, OperationSettledError, UnknownOperationError
from tidings.records.instances import Instance
from tidings.store import Row, Store, Tx
from tidings.support.policy import check_id, check_slug, encode_json
from tidings.types import JSON, InstanceId, Operation, OperationId, OperationState, new_id


def accept(
    tx: Tx, instance: Instance, kind: str, owner: str, *, idempotency_key: str | None = None
) -> Operation:
    """Record an operation as accepted by ``instance``, before anything external runs.

    With an ``idempotency_key`` already used by ``owner``, the first operation is returned.
    """
    instance.require_running()
    check_slug(kind, "operation kind")
    check_id(owner, "owner")
    key = check_id(idempotency_key, "idempotency key") if idempotency_key else None
    operation_id = new_id("op")
    now_us = instance.clock.now_us()
    if key is None:
        # No key of the caller's: nothing to find, so nothing is read back -- the row written
        # is the one given (PostgreSQL sends it with the unit's other writes).
        def gone() -> Exception:
            instance.declared_gone()
            return InstanceNotRunningError()

        tx.run_later(
            "accept_new_operation", expect=1, mismatch=gone, operation_id=operation_id,
            kind=kind, owner=owner, origin_instance=instance.instance_id, now_us=now_us,
        )
        return Operation(
            operation_id=OperationId(operation_id), kind=kind, owner=owner,
            origin_instance=instance.instance_id, state=OperationState.ACCEPTED,
            accepted_at_us=now_us, settled_at_us=None, outcome=None, failure_code=None,
        )
    row = tx.one(
        "accept_operation",
        operation_id=operation_id,
        kind=kind,
        owner=owner,
        origin_instance=instance.instance_id,
        idempotency_key=key,
        now_us=now_us,
    )
    if row is None:  # a concurrent accept won the key, or this instance was declared gone
        row = tx.one("operation_by_key", owner=owner, idempotency_key=key)
    if row is None:
        instance.declared_gone()
        raise InstanceNotRunningError()
    return _operation(row)


def complete(tx: Tx, instance: Instance, operation_id: str, outcome: JSON = None) -> Operation:
    """Settle an accepted operation as completed, with a bounded JSON outcome."""
    text = None
    if outcome is not None:
        text, _ = encode_json(
            outcome, "outcome", limit_bytes=instance.config.payload_limit_bytes
        )
    return _settle(tx, instance, operation_id, OperationState.COMPLETED, text, None)


def fail(tx: Tx, instance: Instance, operation_id: str, failure_code: str) -> Operation:
    """Settle an accepted operation as failed, with a non-sensitive failure code."""
    check_slug(failure_code, "failure code")
    return _settle(tx, instance, operation_id, OperationState.FAILED, None, failure_code)


def mark_outcome_unknown(tx: Tx, instance: Instance, operation_id: str) -> Operation:
    """Settle an accepted operation as outcome_unknown: it may or may not have happened."""
    return _settle(tx, instance, operation_id, OperationState.OUTCOME_UNKNOWN, None, None)


async def get(store: Store, operation_id: str) -> Operation:
    """The operation as committed; :class:`UnknownOperationError` if there is none."""
    row = await store.read(lambda tx: tx.one("get_operation", operation_id=operation_id))
    if row is None:
        raise UnknownOperationError(operation_id)
    return _operation(row)


def _settle(
    tx: Tx,
    instance: Instance,
    operation_id: str,
    state: OperationState,
    outcome: str | None,
    failure_code: str | None,
) -> Operation:
    changed = tx.execute(
        "settle_operation",
        operation_id=operation_id,
        state=state.value,
        outcome=outcome,
        failure_code=failure_code,
        now_us=instance.clock.now_us(),
    )
    row = tx.one("get_operation", operation_id=operation_id)
    if row is None:
        raise UnknownOperationError(operation_id)
    if changed == 0:
        raise OperationSettledError(operation_id, row["state"])
    return _operation(row)


def _operation(row: Row) -> Operation:
    return Operation(
        operation_id=OperationId(row["operation_id"]),
        kind=row["kind"],
        owner=row["owner"],
        origin_instance=InstanceId(row["origin_instance"]),
        state=OperationState(row["state"]),
        accepted_at_us=row["accepted_at_us"],
        settled_at_us=row["settled_at_us"],
        outcome=None if row["outcome"] is None else json.loads(row["outcome"]),
        failure_code=row["failure_code"],
    )


__all__ = ("accept", "complete", "fail", "get", "mark_outcome_unknown")
