"""What a turn's model request is made of, as pure functions: the profile a retry or a receipt
runs on (C8, M5, M10), the inputs as prompt messages, and the history that fits the request's
bound (M11)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from tidings.models.base import PromptMessage
from tidings.support.policy import receipt_profile
from tidings.turns.context import history_window
from tidings.turns.plan import TurnFailed
from tidings.types import Input, Profile, RunStatus


def retry_profile(profile: Profile, inputs: Sequence[Input]) -> Profile:
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
            profile = unspent(receipt_profile(profile, retry["environment"]),
                              retry.get("spent", []))
        model = retry.get("model")
        if isinstance(model, str) and model in profile.models:
            return replace(profile, model=model,
                           fallbacks=tuple(m for m in profile.models if m != model))
    return profile


def unspent(profile: Profile, spent: Sequence[str]) -> Profile:
    """The profile on the models not spent yet (the first left leads)."""
    left = [m for m in profile.models if m not in spent]
    if not left or left == list(profile.models):
        return profile
    return replace(profile, model=left[0], fallbacks=tuple(left[1:]))


def input_message(item: Input) -> PromptMessage:
    return PromptMessage(
        "user", item.content, origin=item.origin.value,
        meta={**item.meta, "input_id": item.input_id},
    )


def request_chars(message: PromptMessage) -> int:
    """A message's size as a request's bound counts it: its text and its calls."""
    return len(message.content) + sum(
        len(c.name) + len(json.dumps(c.arguments, default=str)) for c in message.tool_calls
    )


def fit_history(
    history: list[PromptMessage],
    *,
    profile: Profile,
    inputs: Sequence[Input],
    bounds: Sequence[Any],
    total: int,
) -> tuple[list[PromptMessage], dict[str, int] | None]:
    """The newest history that fits the request's bound -- the smallest of ``bounds`` that is
    a positive int (an explicit history budget, the leading model's ``context_chars``) -- and
    the ``context_trimmed`` facts when it was cut (M11). A retry prepares its request again and
    is not cut: it raises :class:`TurnFailed` ``history_exceeds_fit`` (needs_attention), its
    prompt kept for a model with a larger window or an explicit budget."""
    usable = [b for b in bounds if isinstance(b, int) and b > 0]
    if not usable:
        return history, None
    fit = min(usable)
    fixed = len(profile.system) + sum(request_chars(input_message(i)) for i in inputs)
    sizes = [request_chars(m) for m in history]
    if fixed + sum(sizes) <= fit:
        return history, None
    if any(isinstance(i.meta.get("retry"), dict) for i in inputs):
        raise TurnFailed(RunStatus.NEEDS_ATTENTION, "history_exceeds_fit", [{
            "request_chars": fixed + sum(sizes), "fit_chars": fit, "model": profile.model,
        }])
    start, left = 0, fixed + sum(sizes)
    while start < len(history) and left > fit:
        left -= sizes[start]
        start += 1
    kept = history_window(history[start:])
    return kept, {"messages_total": total, "messages_sent": len(kept), "fit_chars": fit}


__all__ = ("fit_history", "input_message", "request_chars", "retry_profile", "unspent")
