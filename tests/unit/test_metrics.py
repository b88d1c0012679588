"""A6: the Prometheus text exposition of counters, histograms and gauges."""

from __future__ import annotations

from tidings.metrics import Gauge, Metrics


def test_a6_render_counters_histograms_and_gauges_in_prometheus_text() -> None:
    metrics = Metrics(buckets=(0.01, 0.1, 1.0))
    metrics.count("tidings_model_errors_total", "Failed model calls.",
                  labels={"model": "m", "kind": "retryable"})
    metrics.count("tidings_model_errors_total", "Failed model calls.",
                  labels={"model": "m", "kind": "retryable"})
    for seconds in (0.005, 0.05, 0.5, 5.0):
        metrics.observe("tidings_turn_seconds", "Turn latency.", seconds, {"trigger": "person"})
    text = metrics.render([Gauge("tidings_signal_backlog", "Unacknowledged signals.", 3)])
    lines = text.splitlines()
    assert "# TYPE tidings_signal_backlog gauge" in lines
    assert "tidings_signal_backlog 3" in lines
    assert "# TYPE tidings_model_errors_total counter" in lines
    assert 'tidings_model_errors_total{kind="retryable",model="m"} 2' in lines
    assert "# TYPE tidings_turn_seconds histogram" in lines
    # Buckets are cumulative and end with +Inf, which counts every observation.
    assert 'tidings_turn_seconds_bucket{trigger="person",le="0.01"} 1' in lines
    assert 'tidings_turn_seconds_bucket{trigger="person",le="0.1"} 2' in lines
    assert 'tidings_turn_seconds_bucket{trigger="person",le="1"} 3' in lines
    assert 'tidings_turn_seconds_bucket{trigger="person",le="+Inf"} 4' in lines
    assert 'tidings_turn_seconds_count{trigger="person"} 4' in lines
    assert text.endswith("\n")


def test_a6_label_values_cannot_break_the_exposition() -> None:
    metrics = Metrics()
    metrics.count("x_total", "X.", labels={"model": 'evil"\nname\\'})
    line = next(s for s in metrics.render().splitlines() if s.startswith("x_total{"))
    assert "\n" not in line
    assert line.count('"') == 2


def test_l3_only_config_approval_and_job_events_are_passive() -> None:
    from tidings.policy import wakes

    assert wakes("task.exited")
    assert wakes("restart_completed")
    assert not wakes("config.changed")
    assert not wakes("approval.decided")
    assert not wakes("job.progress")
