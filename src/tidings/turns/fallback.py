"""Asking a profile's models in order, and remembering which were found unavailable.

Each model of a profile is asked in turn: a retryable error is asked again after a backoff
pause, an unavailable model (down, overloaded, unreachable, not registered) gives way to the
next, a permanent error fails the run. When every model is spent the run needs attention, and
what each model said is kept (B7): one entry per model, in the profile's order --
``model``, ``reason`` (``not registered``, ``HTTP 503``, ``timed out``, ``cooling down``, or the
error's kind), ``kind``, ``status``, ``error_class``, ``message`` (an excerpt) and ``attempts``.

Fallback health (B9): a model found unavailable is skipped for a cool-down, jittered and capped
(:func:`tidings.support.policy.backoff`, longer each time it is found unavailable again,
forgotten once it answers), in this process and across turns, instead of being asked on every
step. Two exceptions keep a run from failing without asking anyone: when every registered model
of the profile is cooling down, the first of them is asked anyway; and a person's retry naming
a model asks it, cooling down or not.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from tidings.clock import Clock, to_us
from tidings.feed import Draft, FeedHub
from tidings.models.base import Model, ModelError, ModelErrorKind, ModelReply, ModelRequest
from tidings.support.metrics import Gauge, Metrics
from tidings.support.policy import backoff
from tidings.support.tracing import Tracing
from tidings.turns import spans
from tidings.turns.plan import TurnConfig, TurnFailed, TurnPlan, TurnProgress
from tidings.turns.usage import spend
from tidings.types import Input, Profile, RunStatus

log = logging.getLogger("tidings.turns")

MESSAGE_EXCERPT = 200
SKIPS = "tidings_model_skips_total"
COOLING = "tidings_models_cooling_down"


class ModelHealth:
    """The models found unavailable lately, and until when each is skipped (process-local)."""

    def __init__(self, clock: Clock, config: TurnConfig, rng: random.Random) -> None:
        self._clock, self._config, self._rng = clock, config, rng
        self._down: dict[str, tuple[int, int]] = {}  # model -> (times found down, until_us)

    def cooling(self, name: str) -> bool:
        down = self._down.get(name)
        return down is not None and down[1] > self._clock.now_us()

    def unavailable(self, name: str) -> None:
        times = self._down.get(name, (0, 0))[0] + 1
        pause = backoff(times, self._rng, base=self._config.model_cooldown_base,
                        cap=self._config.model_cooldown_cap)
        self._down[name] = (times, self._clock.now_us() + to_us(pause))

    def answered(self, name: str) -> None:
        self._down.pop(name, None)

    def gauges(self) -> Iterable[Gauge]:
        """How many models are cooling down, and how long each has left (read at render)."""
        now = self._clock.now_us()
        left = {name: until - now for name, (_, until) in self._down.items() if until > now}
        yield Gauge(COOLING, "Models skipped for a cool-down after they were found unavailable.",
                    len(left))
        for name, us in sorted(left.items()):
            yield Gauge("tidings_model_cooldown_seconds",
                        "Seconds left before a cooling model is asked again.", us / 1e6,
                        {"model": name})


def retried_model(inputs: Sequence[Input]) -> str | None:
    """The model a person's retry names, if any (it is asked even while cooling down)."""
    for item in reversed(inputs):
        retry = item.meta.get("retry")
        if isinstance(retry, dict) and isinstance(retry.get("model"), str):
            return str(retry["model"])
    return None


def _entry(name: str, reason: str, kind: str, *, attempt: int | None = None,
           error: ModelError | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"model": name, "kind": kind, "reason": reason}
    if attempt is not None:
        entry["attempt"] = attempt
    if error is not None:
        cause = error.__cause__
        entry["status"] = error.status
        entry["error_class"] = type(cause if cause is not None else error).__name__
        entry["error"] = error.message[:MESSAGE_EXCERPT]
    return entry


def _reason(error: ModelError) -> str:
    if error.status is not None:
        return f"HTTP {error.status}"
    if error.message == "timed out":
        return "timed out"
    return error.kind.value


def model_failures(errors: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One entry per model, in the order asked: its last failure and how often it was asked."""
    by_model: dict[str, dict[str, Any]] = {}
    for e in errors:
        name = str(e.get("model", ""))
        attempts = by_model.get(name, {}).get("attempts", 0) + (1 if "attempt" in e else 0)
        by_model[name] = {
            "model": name, "reason": e.get("reason", e.get("kind")), "kind": e.get("kind"),
            "status": e.get("status"), "error_class": e.get("error_class"),
            "message": e.get("error"), "attempts": attempts,
        }
    return list(by_model.values())


class Fallback:
    """Asks the models of a profile (see the module); one per runner, its health shared by
    every turn of the process."""

    def __init__(self, models: Mapping[str, Model], config: TurnConfig, clock: Clock, *,
                 metrics: Metrics | None, tracing: Tracing, feed: FeedHub | None,
                 rng: random.Random) -> None:
        self.models, self.config, self.metrics = models, config, metrics
        self.tracing, self.feed, self._rng, self.clock = tracing, feed, rng, clock
        self.health = ModelHealth(clock, config, rng)
        if metrics is not None:
            metrics.add_gauges(self.health.gauges)

    def _skipped(self, profile: Profile, forced: str | None) -> set[str]:
        registered = [m for m in profile.models if m in self.models]
        cooling = {m for m in registered if m != forced and self.health.cooling(m)}
        if registered and cooling == set(registered):
            cooling.discard(registered[0])  # never fail a run without asking anyone
        return cooling

    async def call(self, request: ModelRequest, profile: Profile, progress: TurnProgress,
                   plan: TurnPlan | None = None) -> ModelReply:
        """The first reply of the profile's models, asked in order (see the module)."""
        errors: list[dict[str, Any]] = []
        cfg = self.config
        skipped = self._skipped(profile, None if plan is None else retried_model(plan.inputs))
        for name in profile.models:
            model = self.models.get(name)
            if model is None:
                errors.append(_entry(name, "not registered", "unavailable"))
                continue
            if name in skipped:
                errors.append(_entry(name, "cooling down", "unavailable"))
                if self.metrics is not None:
                    self.metrics.count(SKIPS, "Model calls skipped: the model was cooling down.",
                                       labels={"model": name})
                continue
            for attempt in range(1, cfg.model_attempts + 1):
                draft = self._draft(plan, progress)
                try:
                    async with (
                        spans.model_call(self.tracing, progress.span, request, model=name,
                                         attempt=attempt) as span,
                        asyncio.timeout(to_us(cfg.model_timeout) / 1e6),
                    ):
                        reply = await model.complete(
                            # The request is immutable: shared when it names the model already.
                            request if request.model == name else replace(request, model=name),
                            on_delta=None if draft is None else draft.append,
                        )
                        spans.model_replied(span, reply)
                    if draft is not None:
                        draft.seal()
                    spend(progress, self.metrics, name, reply)
                    progress.model = name
                    self.health.answered(name)
                    return reply
                except TimeoutError:
                    error = ModelError(ModelErrorKind.RETRYABLE, "timed out", model=name)
                    discard(progress, "timed_out")
                except ModelError as exc:
                    error = exc
                    discard(progress, error.failure_code)
                except Exception as exc:  # an adapter bug must not take the runtime down
                    log.exception("model %s raised an unclassified error", name)
                    error = ModelError(ModelErrorKind.UNAVAILABLE, type(exc).__name__, model=name)
                    error.__cause__ = exc
                    discard(progress, error.failure_code)
                spend(progress, self.metrics, name, error)  # a failed call may have spent too
                errors.append(_entry(name, _reason(error), error.kind.value, attempt=attempt,
                                     error=error))
                if self.metrics is not None:
                    self.metrics.count(
                        "tidings_model_errors_total", "Failed model calls, by kind.",
                        labels={"model": name, "kind": error.kind.value},
                    )
                if error.kind is ModelErrorKind.PERMANENT:
                    self._log_spent(plan, errors)
                    raise TurnFailed(RunStatus.FAILED, error.failure_code, errors)
                if error.kind is ModelErrorKind.UNAVAILABLE:
                    self.health.unavailable(name)
                    break
                if attempt < cfg.model_attempts:
                    await self.clock.sleep(self._retry_delay(attempt))
        self._log_spent(plan, errors)
        raise TurnFailed(RunStatus.NEEDS_ATTENTION, "model_retries_exhausted", errors)

    def _log_spent(self, plan: TurnPlan | None, errors: Sequence[Mapping[str, Any]]) -> None:
        said = "; ".join(
            f"{f['model']}: {f['reason']}"
            + (f" ({f['error_class']}: {f['message']})" if f.get("message") else "")
            for f in model_failures(errors)
        )
        log.warning("run %s: no model answered: %s", "-" if plan is None else plan.run_id,
                    said, extra={} if plan is None else {
                        "conversation_id": plan.conversation_id, "run_id": plan.run_id})

    def _draft(self, plan: TurnPlan | None, progress: TurnProgress) -> Draft | None:
        if self.feed is None or plan is None:
            return None
        progress.draft = self.feed.draft(plan.conversation_id, plan.run_id, progress.steps)
        return progress.draft

    def _retry_delay(self, attempt: int) -> float:
        cfg = self.config
        return backoff(attempt, self._rng, base=cfg.retry_base, cap=cfg.retry_cap).total_seconds()


def discard(progress: TurnProgress, reason: str) -> None:
    """The step's answer in progress will not commit: watchers drop it (B1)."""
    if progress.draft is not None:
        progress.draft.discard(reason)
        progress.draft = None


__all__ = ("Fallback", "ModelHealth", "discard", "model_failures", "retried_model")
