"""B7 and B9 through a runtime on both backends and a provider on loopback: a run that
exhausts its models says, on the run, in its end event and in the log, which models failed
and why; a model found unavailable cools down -- skipped on the next turn, shown in the
metrics -- unless every model cools (the first is asked anyway) or a person's retry names it."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import RuntimeFactory
from tests.models.loopback import LoopbackServer, openai_error
from tidings import Profile, RunStatus, Runtime, ScriptedModel
from tidings.models.openai import OpenAIChatModel
from tidings.runtime.root import RuntimeConfig
from tidings.turns.plan import TurnConfig

# A cool-down far longer than any test: what is cooling stays cooling, whatever the timing.
COOL = RuntimeConfig(turns=TurnConfig(model_attempts=2, retry_base=timedelta(0),
                                      model_cooldown_base=timedelta(hours=1),
                                      model_cooldown_cap=timedelta(hours=1)))


@pytest_asyncio.fixture
async def primary(server: LoopbackServer) -> AsyncIterator[OpenAIChatModel]:
    """A model on the loopback server (which answers 503, down, to each request pushed)."""
    model = OpenAIChatModel("primary", base_url=f"{server.base_url}/v1", api_key="k",
                            stream=False)
    try:
        yield model
    finally:
        await model.aclose()


def down(server: LoopbackServer, times: int) -> None:
    server.push(*[openai_error(503, "the service is down for maintenance")] * times)


def metric(rt: Runtime, name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(rt.metrics.render()):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return None


async def test_b7_a_run_that_exhausts_its_models_says_which_failed_and_why(
    runtimes: RuntimeFactory, server: LoopbackServer, primary: OpenAIChatModel,
    caplog: pytest.LogCaptureFixture,
) -> None:
    down(server, 1)
    rt = await runtimes(models={"gone": ScriptedModel(name="gone"), "primary": primary},
                        config=COOL)
    conv = (await rt.create_conversation(
        "alice", Profile(model="gone", fallbacks=("primary",)))).conversation_id
    del rt.models["gone"]  # named when the profile was made, gone since (a restart without it)
    with caplog.at_level(logging.WARNING, logger="tidings.turns"):
        await rt.post(conv, "hello")
        await rt.settle(conv)

    (run,) = await rt.runs.list(conv)
    assert (run.status, run.failure_code) == (RunStatus.NEEDS_ATTENTION,
                                              "model_retries_exhausted")
    gone, answered = run.model_failures
    assert (gone["model"], gone["reason"], gone["attempts"]) == ("gone", "not registered", 0)
    assert (answered["model"], answered["reason"], answered["status"], answered["kind"],
            answered["attempts"]) == ("primary", "HTTP 503", 503, "unavailable", 1)
    assert answered["error_class"] == "InternalServerError"  # the SDK's class for a 5xx
    assert "503" in answered["message"]
    assert len(server.requests) == 1  # unavailable: no retry of the same model
    assert (await rt.runs.get(run.run_id)).model_failures == run.model_failures

    ended = [e for e in await rt.events(conv)
             if e.type == "turn_status" and e.data.get("status") == "needs_attention"]
    assert ended[-1].data["model_failures"] == list(run.model_failures)

    [said] = [r.getMessage() for r in caplog.records if "no model answered" in r.getMessage()]
    assert run.run_id in said
    assert "gone: not registered" in said
    assert "primary: HTTP 503 (InternalServerError: " in said


async def test_b9_an_unavailable_model_is_skipped_on_the_next_turn_and_metrics_show_it(
    runtimes: RuntimeFactory, server: LoopbackServer, primary: OpenAIChatModel,
) -> None:
    down(server, 3)
    spare = ScriptedModel(name="spare", default={"text": "the spare answers"})
    failing = ScriptedModel(name="failing", default={"error": "permanent"})
    rt = await runtimes(models=[primary, spare, failing], config=COOL)
    conv = (await rt.create_conversation(
        "alice", Profile(model="primary", fallbacks=("spare",)))).conversation_id

    await rt.post(conv, "first")
    await rt.settle(conv)
    assert len(server.requests) == 1
    assert metric(rt, "tidings_models_cooling_down") == 1.0
    assert metric(rt, "tidings_model_skips_total", model="primary") is None

    await rt.post(conv, "second")
    await rt.settle(conv)
    assert len(server.requests) == 1  # cooling down: not asked again
    runs = await rt.runs.list(conv)
    assert [(r.status, r.model) for r in runs] == [(RunStatus.COMPLETED, "spare")] * 2
    assert metric(rt, "tidings_model_skips_total", model="primary") == 1.0
    left = metric(rt, "tidings_model_cooldown_seconds", model="primary")
    assert left is not None
    assert 0 < left <= 3600

    # Every model of this profile is cooling: the first is asked anyway, never no one.
    alone = (await rt.create_conversation("alice", Profile(model="primary"))).conversation_id
    await rt.post(alone, "anyone?")
    await rt.settle(alone)
    assert len(server.requests) == 2
    (failed,) = await rt.runs.list(alone)
    assert failed.model_failures[0]["reason"] == "HTTP 503"

    # A person's retry naming the cooling model asks it, though another model is not cooling.
    other = (await rt.create_conversation(
        "alice", Profile(model="failing", fallbacks=("primary",)))).conversation_id
    await rt.post(other, "fail")
    await rt.settle(other)
    (refused,) = await rt.runs.list(other)
    assert refused.status is RunStatus.FAILED
    await rt.runs.retry(other, refused.run_id, model="primary")
    await rt.settle(other)
    assert len(server.requests) == 3
    retried = (await rt.runs.list(other))[-1]
    assert retried.model_failures[0]["model"] == "primary"
    assert retried.model_failures[0]["reason"] == "HTTP 503"
