"""Process-local metrics (A6), exposed in the Prometheus text format through ``prometheus_client``.

Counters and histograms are recorded by the components as things happen (a turn ends, a
notification is committed); gauges that describe the database (backlog, oldest age, dead
letters) are read when the metrics are rendered, so they are the same on every instance.

Invariants:

- Each :class:`Metrics` owns its own ``CollectorRegistry``, never the process-wide default, so
  several runtimes in one process (tests, an embedding application) keep apart and never
  collide on a metric name.
- A metric's type, help text and label names are fixed by its first use; a counter's name ends
  in ``_total`` (added when missing, as Prometheus names counters).
- The exposition holds exactly the series recorded and the gauges passed in: the ``_created``
  series that ``prometheus_client`` adds for OpenMetrics are left out (the library's switch for
  that is process-wide, and would change an embedding application's own metrics).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client import Gauge as PromGauge
from prometheus_client.core import GaugeMetricFamily, Metric

from tidings.types import Usage

MODEL_CALLS = "tidings_model_calls_total"
MODEL_TOKENS = "tidings_model_tokens_total"

LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0,
)


@dataclass(frozen=True, slots=True)
class Gauge:
    """A value read at render time."""

    name: str
    help: str
    value: float
    labels: Mapping[str, str] = field(default_factory=dict)


class Metrics:
    """Counters and latency histograms of one runtime; thread-safe, cheap to record."""

    def __init__(self, *, buckets: Sequence[float] = LATENCY_BUCKETS_S) -> None:
        self._buckets = tuple(sorted(buckets))
        self.registry = CollectorRegistry()
        """This runtime's own registry (see the module's invariants)."""
        self._lock = threading.Lock()  # guards creating a family, not recording into one
        self._counters: dict[str, Counter] = {}
        self._histograms: dict[str, Histogram] = {}
        self._live: list[Callable[[], Iterable[Gauge]]] = []
        self._gauges: dict[str, PromGauge] = {}
        self._series: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}
        """Each recorded series (a family's labelled child) by name and labels: recording
        into one again is a dict lookup, not the library's label validation."""
        self._model_series: dict[str, tuple[Any, ...]] = {}
        """Per model, its calls' series then its tokens' by kind (:meth:`count_model_call`)."""

    def add_gauges(self, read: Callable[[], Iterable[Gauge]]) -> None:
        """Gauges a component reads from its own state at every render (models cooling down)."""
        self._live.append(read)

    def count(
        self, name: str, help: str, amount: float = 1, labels: Mapping[str, str] | None = None
    ) -> None:
        key = (name, tuple(labels.items()) if labels else ())
        series = self._series.get(key)
        if series is None:
            counter = self._counter(_counter_name(name), help, labels)
            series = self._series[key] = counter.labels(**labels) if labels else counter
        series.inc(amount)

    def count_component_failure(self, component: str) -> None:
        """A run of a runtime component that ended on an error (it runs again after a pause):
        ``tidings_component_failures_total{component}``."""
        self.count("tidings_component_failures_total",
                   "Runs of a runtime component that ended on an error (each runs again after "
                   "a pause).", labels={"component": component})

    def count_model_call(self, model: str, usage: Usage) -> None:
        """One model call (answered or failed) and the tokens it spent, by model and kind.

        ``tidings_model_calls_total{model}`` and ``tidings_model_tokens_total{model,kind}``,
        ``kind`` one of ``input`` (every prompt token, cached ones included), ``output``,
        ``cache_read`` and ``cache_write`` (the parts of ``input`` the provider's prompt cache
        read or wrote). A kind the provider did not report adds zero.
        """
        series = self._model_series.get(model)
        if series is not None:
            # The model's five series, found once: a call adds to them, and adding zero is
            # skipped (the series is there since the model's first call, at its value).
            calls, *kinds = series
            calls.inc(usage.model_calls)
            for kind_series, amount in zip(kinds, usage.tokens().values(), strict=True):
                if amount:
                    kind_series.inc(amount)
            return
        self.count(
            MODEL_CALLS, "Model calls made, answered or failed, by model.",
            usage.model_calls, {"model": model},
        )
        for kind, amount in usage.tokens().items():
            self.count(
                MODEL_TOKENS,
                "Tokens spent by model calls, by model and kind (input includes the cached "
                "prompt tokens; cache_read and cache_write are parts of it).",
                amount, {"model": model, "kind": kind},
            )
        self._model_series[model] = (
            self._series[(MODEL_CALLS, (("model", model),))],
            *(self._series[(MODEL_TOKENS, (("model", model), ("kind", kind)))]
              for kind in usage.tokens()),
        )

    def observe(
        self, name: str, help: str, seconds: float, labels: Mapping[str, str] | None = None
    ) -> None:
        key = ("histogram:" + name, tuple(labels.items()) if labels else ())
        series = self._series.get(key)
        if series is None:
            histogram = self._histogram(name, help, labels)
            series = self._series[key] = histogram.labels(**labels) if labels else histogram
        series.observe(max(0.0, seconds))

    def set_gauge(
        self, name: str, help: str, value: float, labels: Mapping[str, str] | None = None
    ) -> None:
        """A gauge this process sets as things change (an MCP server's connection is up)."""
        with self._lock:
            gauge = self._gauges.get(name)
            if gauge is None:
                gauge = self._gauges[name] = PromGauge(
                    name, help, sorted(labels or ()), registry=self.registry
                )
        (gauge.labels(**labels) if labels else gauge).set(value)

    def gauge_value(self, name: str, labels: Mapping[str, str] | None = None) -> float | None:
        return self.registry.get_sample_value(name, dict(labels or {}))

    def counter_value(self, name: str, labels: Mapping[str, str] | None = None) -> float:
        value = self.registry.get_sample_value(_counter_name(name), dict(labels or {}))
        return value or 0

    def histogram_count(self, name: str, labels: Mapping[str, str] | None = None) -> int:
        return int(self.registry.get_sample_value(f"{name}_count", dict(labels or {})) or 0)

    def render(self, gauges: Iterable[Gauge] = ()) -> str:
        """The Prometheus text format (version 0.0.4): the gauges, then every recorded series."""
        live = [g for read in self._live for g in read()]
        return generate_latest(_Exposition(self.registry, (*gauges, *live))).decode()

    def _counter(self, name: str, help: str, labels: Mapping[str, str] | None) -> Counter:
        with self._lock:
            counter = self._counters.get(name)
            if counter is None:
                counter = self._counters[name] = Counter(
                    name, help, sorted(labels or ()), registry=self.registry
                )
            return counter

    def _histogram(self, name: str, help: str, labels: Mapping[str, str] | None) -> Histogram:
        with self._lock:
            histogram = self._histograms.get(name)
            if histogram is None:
                histogram = self._histograms[name] = Histogram(
                    name, help, sorted(labels or ()), registry=self.registry,
                    buckets=self._buckets,
                )
            return histogram


def _counter_name(name: str) -> str:
    return name if name.endswith("_total") else f"{name}_total"


class _Exposition:
    """What one render exposes: the gauges read for it, then the registry's series."""

    def __init__(self, registry: CollectorRegistry, gauges: tuple[Gauge, ...]) -> None:
        self._registry = registry
        self._gauges = gauges

    def collect(self) -> Iterator[Metric]:
        families: dict[str, GaugeMetricFamily] = {}
        for gauge in self._gauges:
            family = families.get(gauge.name)
            if family is None:
                family = families[gauge.name] = GaugeMetricFamily(
                    gauge.name, gauge.help, labels=sorted(gauge.labels)
                )
            family.add_metric([gauge.labels[k] for k in sorted(gauge.labels)], gauge.value)
        yield from families.values()
        for metric in self._registry.collect():
            # Each collect() builds fresh Metric objects: dropping samples here changes nothing
            # recorded.
            created = f"{metric.name}_created"
            metric.samples = [s for s in metric.samples if s.name != created]
            yield metric


__all__ = ("LATENCY_BUCKETS_S", "MODEL_CALLS", "MODEL_TOKENS", "Gauge", "Metrics")
