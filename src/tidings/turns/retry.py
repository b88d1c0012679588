"""A person's retry of a run (C8, M10): a pure decision, and the one unit that admits it.

:func:`admit_retry` says whether a run may be retried, on which model, and what the retry's
input carries. :func:`retry` is the unit over the locked conversation: it reads the run, the
receipt it read and the models it spent, asks :func:`admit_retry`, and admits the answer
through the door -- in the unit that may also start the turn.
:func:`~tidings.turns.request.retry_profile` reads what it wrote, when the retry's turn runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tidings.errors import InvalidInputError, UnknownRunError
from tidings.mail.door import Door
from tidings.records.rows import input_from_row, run_from_row
from tidings.records.transcript import ConversationTx
from tidings.support.policy import check_id, receipt_profile
from tidings.types import Author, Input, Profile, Run, RunStatus


@dataclass(frozen=True, slots=True)
class RetryInput:
    """The input a retry enters through the door with."""

    text: str
    idempotency_key: str
    """One per run and model: retrying the same run with the same model twice admits once."""
    kernel_meta: Mapping[str, Any]


def receipt_environment(inputs: Iterable[Input], run_id: str) -> dict[str, Any] | None:
    """The frozen environment of the receipt a mail run read, if ``run_id`` is one (M10)."""
    return next((
        i.meta["environment"] for i in inputs
        if i.run_id == run_id and i.origin.is_kernel
        and isinstance(i.meta.get("environment"), dict)
    ), None)


def admit_retry(
    run: Run,
    profile: Profile,
    *,
    conversation_id: str,
    model: str | None,
    environment: Mapping[str, Any] | None,
    spent: Sequence[str] = (),
) -> RetryInput:
    """Admit a retry of ``run`` (of ``conversation_id``, on ``profile``), or refuse it.

    Only a failed run, or one that needs attention, is retried. A mail run keeps its receipt's
    frozen ``environment``: the retry runs on it, may name only a model it allows, and does not
    renew the route its first run ``spent`` -- only an unspent model (M10).
    """
    run_id = run.run_id
    if run.conversation_id != conversation_id:
        raise UnknownRunError(run_id)
    if run.status not in (RunStatus.FAILED, RunStatus.NEEDS_ATTENTION):
        raise InvalidInputError(f"run {run_id!r} is {run.status.value}: only a failed run "
                                "or one that needs attention is retried")
    allowed = (receipt_profile(profile, dict(environment)).models
               if environment is not None else profile.models)
    if model is not None and model not in allowed:
        raise InvalidInputError(
            f"model {model!r} is not one this run may use ({', '.join(allowed)})"
        )
    retry: dict[str, Any] = {"run_public_id": run_id, "model": model}
    if environment is not None:
        if model in spent:
            raise InvalidInputError(f"model {model!r} was spent by run {run_id!r}; name "
                                    "another the run may use")
        if all(m in spent for m in allowed):
            raise InvalidInputError(f"every model run {run_id!r} may use is spent "
                                    f"({', '.join(allowed)})")
        retry["environment"] = environment
        retry["spent"] = list(spent)
    return RetryInput(
        text="Please retry the request that failed" + (f", with {model}." if model else "."),
        idempotency_key=f"retry-{run_id}-{model or 'default'}"[:200],
        kernel_meta={"retry": retry},
    )


def retry(
    cx: ConversationTx, door: Door, run_id: str, *, model: str | None,
    authored_by: Author | None, owner: str | None,
) -> Input:
    """Admit a retry of ``run_id`` as the person's input, on the locked conversation (whose
    ownership the caller has checked); the same run and model twice is admitted once."""
    check_id(run_id, "run id")
    row = cx.tx.one("get_run", run_id=run_id)
    if row is None:
        raise UnknownRunError(run_id)
    run = run_from_row(row)
    environment: dict[str, Any] | None = None
    spent: list[str] = []
    if run.conversation_id == cx.conversation_id:
        inputs = cx.tx.all("list_inputs", conversation_id=cx.conversation_id, limit=1_000)
        environment = receipt_environment(map(input_from_row, inputs), run_id)
    if environment is not None:
        # The route the run spent is in its final ``turn_status``.
        status = cx.tx.one("last_turn_status", conversation_id=cx.conversation_id,
                           run_id=run_id)
        if status is not None:
            spent = [str(m) for m in json.loads(status["data"]).get("models_spent", [])]
    decided = admit_retry(run, cx.conversation.profile, conversation_id=cx.conversation_id,
                          model=model, environment=environment, spent=spent)
    admission = door.prepare(
        cx.conversation_id, decided.text, authored_by=authored_by, owner=owner,
        idempotency_key=decided.idempotency_key, kernel_meta=decided.kernel_meta,
    )
    return door.admit(cx, admission)


__all__ = ("RetryInput", "admit_retry", "receipt_environment", "retry")
