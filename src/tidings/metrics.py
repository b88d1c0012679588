"""Process-local metrics (A6), rendered in the Prometheus text exposition format.

Counters and histograms are recorded by the components as things happen (a turn ends, a
notification is committed); gauges that describe the database (backlog, oldest age, dead
letters) are read when the metrics are rendered, so they are the same on every instance.
No dependency: the exposition format is a few lines of text.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0,
)

Labels = tuple[tuple[str, str], ...]


def _labels(labels: Mapping[str, str] | None) -> Labels:
    return tuple(sorted((labels or {}).items()))


def _format_labels(labels: Labels, extra: tuple[str, str] | None = None) -> str:
    pairs = [*labels, *([extra] if extra is not None else [])]
    if not pairs:
        return ""
    escaped = (
        f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(10), "").replace(chr(34), "")}"'
        for k, v in pairs
    )
    return "{" + ",".join(escaped) + "}"


def _number(value: float) -> str:
    return repr(float(value)) if value != int(value) else str(int(value))


@dataclass
class _Histogram:
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.buckets)

    def observe(self, value: float) -> None:
        index = bisect.bisect_left(self.buckets, value)
        if index < len(self.counts):
            self.counts[index] += 1
        self.total += value
        self.count += 1


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
        self._lock = threading.Lock()
        self._counters: dict[str, dict[Labels, float]] = {}
        self._histograms: dict[str, dict[Labels, _Histogram]] = {}
        self._help: dict[str, str] = {}

    def count(
        self, name: str, help: str, amount: float = 1, labels: Mapping[str, str] | None = None
    ) -> None:
        with self._lock:
            self._help.setdefault(name, help)
            series = self._counters.setdefault(name, {})
            key = _labels(labels)
            series[key] = series.get(key, 0) + amount

    def observe(
        self, name: str, help: str, seconds: float, labels: Mapping[str, str] | None = None
    ) -> None:
        with self._lock:
            self._help.setdefault(name, help)
            series = self._histograms.setdefault(name, {})
            key = _labels(labels)
            histogram = series.get(key)
            if histogram is None:
                histogram = series[key] = _Histogram(self._buckets)
            histogram.observe(max(0.0, seconds))

    def counter_value(self, name: str, labels: Mapping[str, str] | None = None) -> float:
        with self._lock:
            return self._counters.get(name, {}).get(_labels(labels), 0)

    def histogram_count(self, name: str, labels: Mapping[str, str] | None = None) -> int:
        with self._lock:
            histogram = self._histograms.get(name, {}).get(_labels(labels))
            return 0 if histogram is None else histogram.count

    def render(self, gauges: Iterable[Gauge] = ()) -> str:
        """The Prometheus text format (version 0.0.4)."""
        lines: list[str] = []
        by_name: dict[str, list[Gauge]] = {}
        for gauge in gauges:
            by_name.setdefault(gauge.name, []).append(gauge)
        for name, series in sorted(by_name.items()):
            lines += [f"# HELP {name} {series[0].help}", f"# TYPE {name} gauge"]
            lines += [
                f"{name}{_format_labels(_labels(g.labels))} {_number(g.value)}" for g in series
            ]
        with self._lock:
            for name, counters in sorted(self._counters.items()):
                lines += [f"# HELP {name} {self._help[name]}", f"# TYPE {name} counter"]
                lines += [
                    f"{name}{_format_labels(k)} {_number(v)}" for k, v in sorted(counters.items())
                ]
            for name, histograms in sorted(self._histograms.items()):
                lines += [f"# HELP {name} {self._help[name]}", f"# TYPE {name} histogram"]
                for key, h in sorted(histograms.items()):
                    cumulative = 0
                    for bound, count in zip(h.buckets, h.counts, strict=True):
                        cumulative += count
                        lines.append(
                            f"{name}_bucket{_format_labels(key, ('le', _number(bound)))} "
                            f"{cumulative}"
                        )
                    lines.append(f"{name}_bucket{_format_labels(key, ('le', '+Inf'))} {h.count}")
                    lines.append(f"{name}_sum{_format_labels(key)} {_number(h.total)}")
                    lines.append(f"{name}_count{_format_labels(key)} {h.count}")
        return "\n".join(lines) + "\n"


__all__ = ("LATENCY_BUCKETS_S", "Gauge", "Metrics")
