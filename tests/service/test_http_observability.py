"""A6, S8, S10: health without a token, Prometheus metrics with the signal and task gauges
(operator token)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.service.conftest import OPERATOR, WAIT_S, Live, assert_problem, open_conversation
from tests.waiting import eventually
from tidings.errors import ConnectionLostError
from tidings.types import QueueStats

GAUGES = ("tidings_signal_backlog", "tidings_signal_oldest_age_seconds",
          "tidings_signal_retried", "tidings_dead_letters", "tidings_running_tasks")
_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(
    rf'^({_NAME})(\{{(?:{_NAME}="(?:[^"\\]|\\.)*")(?:,{_NAME}="(?:[^"\\]|\\.)*")*\}})? '
    r"(-?[0-9.]+(?:[eE][-+]?[0-9]+)?|NaN|[+-]Inf)$"
)
_META = re.compile(rf"^# (HELP|TYPE) ({_NAME}) (.+)$")


def parse_prometheus(text: str) -> dict[str, tuple[str, list[tuple[str, float]]]]:
    """Family name -> (type, [(labels, value)]); fails on any line that is not the format."""
    assert text.endswith("\n")
    families: dict[str, tuple[str, list[tuple[str, float]]]] = {}
    for line in text.splitlines():
        if not line:
            continue
        meta = _META.match(line)
        if meta is not None:
            if meta.group(1) == "TYPE":
                assert meta.group(3) in ("gauge", "counter", "histogram", "summary", "untyped")
                assert meta.group(2) not in families, f"TYPE twice: {line}"
                families[meta.group(2)] = (meta.group(3), [])
            continue
        sample = _SAMPLE.match(line)
        assert sample is not None, f"not a sample line: {line!r}"
        name = sample.group(1)
        family = next((f for f in (name, re.sub(r"_(bucket|sum|count)$", "", name))
                       if f in families), None)
        assert family is not None, f"a sample before its TYPE: {line!r}"
        families[family][1].append((sample.group(2) or "", float(sample.group(3))))
    return families


async def test_a6_metrics_are_prometheus_text_with_the_gauges(live: Live) -> None:
    async with live.client() as alice, live.client(OPERATOR) as operator:
        conv = await open_conversation(alice, tools=("shell",))
        await alice.post(f"/v1/conversations/{conv}/inputs", json={"content": "hello"})
        await alice.post(f"/v1/conversations/{conv}/inputs",
                         json={"content": "sleep in the background"})
        await live.runtime.settle(conv)

        async def metrics() -> str:
            response = await operator.get("/metrics")
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
            return response.text

        # Until the background sleep is running in this instance.
        families = parse_prometheus(await eventually(
            metrics,
            lambda text: parse_prometheus(text)["tidings_running_tasks"][1] == [("", 1.0)],
            what="one running task in the metrics", within_s=WAIT_S, poll_s=0.05))
    for gauge in GAUGES:
        kind, samples = families[gauge]
        assert kind == "gauge", gauge
        assert len(samples) == 1, gauge
    assert families["tidings_signal_backlog"][1] == [("", 0.0)]
    assert families["tidings_dead_letters"][1] == [("", 0.0)]
    turns = families["tidings_turn_seconds"]
    assert turns[0] == "histogram"
    assert any(value >= 1 for _, value in turns[1])


async def test_a2_health_needs_no_token_and_is_503_when_the_store_cannot_be_read(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with live.client(None) as anonymous:
        ok = await anonymous.get("/health")
        assert ok.json() == {"status": "ok", "instance_id": live.runtime.instance_id}

        async def unreadable(*args: Any, **kwargs: Any) -> QueueStats:
            raise ConnectionLostError("the database went away")

        monkeypatch.setattr(live.runtime.signals, "stats", unreadable)
        body = assert_problem(await anonymous.get("/health"), 503, "connection_lost")
        assert "went away" not in body["detail"]
