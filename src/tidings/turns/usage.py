"""What a turn's model calls spend: each call, answered or failed, adds to the turn's usage
(written with the run's end, whatever the end) and to the metrics by model."""

from __future__ import annotations

from tidings.models.base import TokenCounts
from tidings.support.metrics import Metrics
from tidings.turns.plan import TurnProgress
from tidings.types import Usage


def of_call(counts: TokenCounts) -> Usage:
    """One call's usage from what its reply (or its error) reports; unreported counts are 0."""
    return Usage(
        model_calls=1,
        input_tokens=counts.input_tokens or 0,
        output_tokens=counts.output_tokens or 0,
        cache_read_tokens=counts.cache_read_tokens or 0,
        cache_write_tokens=counts.cache_write_tokens or 0,
    )


def spend(
    progress: TurnProgress, metrics: Metrics | None, model: str, counts: TokenCounts
) -> None:
    """Add one call to ``model`` to the turn's usage and to the metrics."""
    call = of_call(counts)
    progress.usage += call
    if metrics is not None:
        metrics.count_model_call(model, call)


__all__ = ("of_call", "spend")
