"""A6: the Prometheus text exposition of counters, histograms and gauges."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tidings.support.metrics import Gauge, Metrics
from tidings.types import Usage


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
    # prometheus_client writes numbers as floats ("3.0", le="1.0") and "le" first among the
    # labels: the same samples to any Prometheus parser as the hand-written "3", le="1" were.
    assert "# TYPE tidings_signal_backlog gauge" in lines
    assert "tidings_signal_backlog 3.0" in lines
    assert "# TYPE tidings_model_errors_total counter" in lines
    assert 'tidings_model_errors_total{kind="retryable",model="m"} 2.0' in lines
    assert "# TYPE tidings_turn_seconds histogram" in lines
    # Buckets are cumulative and end with +Inf, which counts every observation.
    assert 'tidings_turn_seconds_bucket{le="0.01",trigger="person"} 1.0' in lines
    assert 'tidings_turn_seconds_bucket{le="0.1",trigger="person"} 2.0' in lines
    assert 'tidings_turn_seconds_bucket{le="1.0",trigger="person"} 3.0' in lines
    assert 'tidings_turn_seconds_bucket{le="+Inf",trigger="person"} 4.0' in lines
    assert 'tidings_turn_seconds_count{trigger="person"} 4.0' in lines
    assert not any("_created" in line for line in lines)  # only the series recorded
    assert text.endswith("\n")


def test_a6_label_values_cannot_break_the_exposition() -> None:
    metrics = Metrics()
    metrics.count("x_total", "X.", labels={"model": 'evil"\nname\\'})
    text = metrics.render()
    line = next(s for s in text.splitlines() if s.startswith("x_total{"))
    assert "\n" not in line
    # Escaped, not stripped: a parser reads back exactly the value recorded.
    (family,) = text_string_to_metric_families(text)
    assert [sample.labels for sample in family.samples] == [{"model": 'evil"\nname\\'}]


def test_a6_runtimes_in_one_process_keep_their_metrics_apart() -> None:
    first, second = Metrics(), Metrics()
    first.count("tidings_model_errors_total", "Failed model calls.", labels={"kind": "x"})
    second.count("tidings_model_errors_total", "Failed model calls.", labels={"kind": "x"})
    second.count("tidings_model_errors_total", "Failed model calls.", labels={"kind": "x"})
    assert first.counter_value("tidings_model_errors_total", {"kind": "x"}) == 1
    assert second.counter_value("tidings_model_errors_total", {"kind": "x"}) == 2
    assert "tidings_model_errors_total" not in generate_latest().decode()  # not the global one


def test_l3_only_config_approval_and_job_events_are_passive() -> None:
    from tidings.support.policy import wakes

    assert wakes("task.exited")
    assert wakes("restart_completed")
    assert not wakes("config.changed")
    assert not wakes("approval.decided")
    assert not wakes("job.progress")


def test_b8_a_model_call_counts_the_call_and_its_tokens_by_model_and_kind() -> None:
    metrics = Metrics()
    metrics.count_model_call("m", Usage(model_calls=1, input_tokens=120, output_tokens=9,
                                        cache_read_tokens=100))
    metrics.count_model_call("m", Usage(model_calls=1, input_tokens=30))
    metrics.count_model_call("other", Usage(model_calls=1))
    lines = metrics.render().splitlines()
    assert "# TYPE tidings_model_calls_total counter" in lines
    assert 'tidings_model_calls_total{model="m"} 2.0' in lines
    assert 'tidings_model_calls_total{model="other"} 1.0' in lines
    assert "# TYPE tidings_model_tokens_total counter" in lines
    assert 'tidings_model_tokens_total{kind="input",model="m"} 150.0' in lines
    assert 'tidings_model_tokens_total{kind="output",model="m"} 9.0' in lines
    assert 'tidings_model_tokens_total{kind="cache_read",model="m"} 100.0' in lines
    assert 'tidings_model_tokens_total{kind="cache_write",model="m"} 0.0' in lines
    assert 'tidings_model_tokens_total{kind="input",model="other"} 0.0' in lines


def test_s9_a_failed_components_runs_are_counted_by_component() -> None:
    metrics = Metrics()
    metrics.count_component_failure("tidings-relay")
    metrics.count_component_failure("tidings-relay")
    metrics.count_component_failure("tidings-webhooks")
    lines = metrics.render([]).splitlines()
    assert "# TYPE tidings_component_failures_total counter" in lines
    assert 'tidings_component_failures_total{component="tidings-relay"} 2.0' in lines
    assert 'tidings_component_failures_total{component="tidings-webhooks"} 1.0' in lines
