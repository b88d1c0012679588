"""A person's retry of a run, decided as a pure function over records (C8, M10).

:func:`admit_retry` says whether a run may be retried, on which model, and what the retry's
input carries; the runtime reads the records, asks it, and admits the answer through the door
in the one unit that may also start the turn. :func:`~tidings.turns.request.retry_profile`
reads what it wrote, when the retry's turn runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tidings.errors import InvalidInputError, UnknownRunError
from tidings.policy import receipt_profile
from tidings.types import Input, Profile, Run, RunStatus


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


__all__ = ("RetryInput", "admit_retry", "receipt_environment")
