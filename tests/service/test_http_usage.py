"""B8: usage over HTTP, through a real server on both backends -- a run's usage on the run reads,
its conversation's sum on the conversation read, and the counters by model on ``/metrics``."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.service.conftest import KEY, OPERATOR, Servers, open_conversation
from tidings.models.scripted import Rule, ScriptedModel

MODEL = ScriptedModel(
    rules=[
        Rule({"text_equals": "cached"}, {"text": "From the cache.", "usage": {
            "input_tokens": 900, "output_tokens": 12, "cache_read_tokens": 800,
            "cache_write_tokens": 50}}),
        Rule({"text_equals": "fail"}, {"error": "permanent", "usage": {"input_tokens": 30}}),
    ],
    default={"text": "Plain.", "usage": {"input_tokens": 40, "output_tokens": 2}},
)


async def test_b8_http_runs_and_the_conversation_show_usage(servers: Servers) -> None:
    live = await servers(await servers.runtimes(models=[MODEL], master_key=KEY))
    async with live.client() as alice, live.client(OPERATOR) as operator:
        conv = await open_conversation(alice)
        base = f"/v1/conversations/{conv}"
        assert (await alice.get(base)).json()["usage"] == {
            "model_calls": 0, "input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0,
            "cache_write_tokens": 0}
        for text in ("cached", "fail", "hello"):
            posted = await alice.post(f"{base}/inputs", json={"content": text})
            assert posted.status_code == 202, posted.text
            await live.runtime.settle(conv)

        runs = (await alice.get(f"{base}/runs")).json()["items"]
        assert [(r["status"], r["usage"]) for r in runs] == [
            ("completed", {"model_calls": 1, "input_tokens": 900, "output_tokens": 12,
                           "cache_read_tokens": 800, "cache_write_tokens": 50}),
            ("failed", {"model_calls": 1, "input_tokens": 30, "output_tokens": 0,
                        "cache_read_tokens": 0, "cache_write_tokens": 0}),
            ("completed", {"model_calls": 1, "input_tokens": 40, "output_tokens": 2,
                           "cache_read_tokens": 0, "cache_write_tokens": 0}),
        ]
        one = (await alice.get(f"{base}/runs/{runs[0]['run_id']}")).json()
        assert one["usage"] == runs[0]["usage"]
        assert (await alice.get(base)).json()["usage"] == {
            "model_calls": 3, "input_tokens": 970, "output_tokens": 14,
            "cache_read_tokens": 800, "cache_write_tokens": 50}
        # A list does not sum: null there, not a zero that would read as "spent nothing".
        [listed] = (await alice.get("/v1/conversations")).json()["items"]
        assert listed["usage"] is None

        metrics = (await operator.get("/metrics")).text
    found = {
        (s.name, s.labels.get("kind", ""), s.labels["model"]): s.value
        for family in text_string_to_metric_families(metrics) for s in family.samples
        if s.name in ("tidings_model_calls_total", "tidings_model_tokens_total")
    }
    assert found == {
        ("tidings_model_calls_total", "", "scripted"): 3.0,
        ("tidings_model_tokens_total", "input", "scripted"): 970.0,
        ("tidings_model_tokens_total", "output", "scripted"): 14.0,
        ("tidings_model_tokens_total", "cache_read", "scripted"): 800.0,
        ("tidings_model_tokens_total", "cache_write", "scripted"): 50.0,
    }
