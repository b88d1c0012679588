"""A4: the scripted model answers by deterministic rules and loads from JSON; the history
window never opens inside a tool exchange."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tidings.errors import InvalidInputError
from tidings.models.base import ModelError, ModelErrorKind, ModelRequest, PromptMessage, ToolCall
from tidings.models.scripted import Rule, ScriptedModel
from tidings.turns.context import history_window
from tidings.types import ConversationId, Message, MessageId


def request(*messages: PromptMessage, suffix: tuple[str, ...] = ()) -> ModelRequest:
    return ModelRequest(model="scripted", system="s", tools=(), messages=messages, suffix=suffix)


def user(text: str, **kw: object) -> PromptMessage:
    return PromptMessage("user", text, **kw)  # type: ignore[arg-type]


RULES = {
    "name": "scripted",
    "rules": [
        {"when": {"text_contains": "build"},
         "reply": {"tool_calls": [{"name": "shell", "arguments": {"cmd": "make"}}]}},
        {"when": {"tool_result": "shell"}, "reply": {"text": "built"}},
        {"when": {"origin": "task_result"}, "reply": {"text": "noted the result"}},
        {"when": {"meta_kind": "task_notification"}, "reply": {"text": "notified"}},
        {"when": {"suffix_contains": "task.exited"}, "reply": {"text": "fact seen"}},
        {"when": {"text_matches": "^fail (\\w+)$"}, "reply": {"error": "unavailable"}},
    ],
    "default": {"echo": True},
}


async def test_a4_scripted_rules_match_text_tool_result_origin_kind_and_suffix() -> None:
    model = ScriptedModel.from_json(json.dumps(RULES))
    reply = await model.complete(request(user("please build it")))
    assert reply.tool_calls == (ToolCall("call_1_0", "shell", {"cmd": "make"}),)
    assert reply.text == ""

    done = await model.complete(request(
        user("please build it"),
        PromptMessage("assistant", "", tool_calls=reply.tool_calls),
        PromptMessage("tool", "ok", tool_call_id="call_1_0", tool_name="shell"),
    ))
    assert done.text == "built"
    assert done.tool_calls == ()
    noted = await model.complete(request(user("x", origin="task_result")))
    assert noted.text == "noted the result"
    kind = user("x", meta={"kind": "task_notification"})
    assert (await model.complete(request(kind))).text == "notified"
    facts = await model.complete(request(user("hi"), suffix=("<runtime_facts>task.exited",)))
    assert facts.text == "fact seen"
    assert (await model.complete(request(user("hello there")))).text == "hello there"
    assert model.calls == 6


async def test_a4_scripted_errors_are_classified() -> None:
    model = ScriptedModel.from_json(RULES)
    with pytest.raises(ModelError) as caught:
        await model.complete(request(user("fail now")))
    assert caught.value.kind is ModelErrorKind.UNAVAILABLE
    assert caught.value.failure_code == "model_unavailable"


async def test_a4_scripted_tool_call_ids_are_deterministic() -> None:
    first = ScriptedModel.from_json(RULES)
    second = ScriptedModel.from_json(RULES)
    one = await first.complete(request(user("a"), user("build")))
    two = await second.complete(request(user("a"), user("build")))
    assert one.tool_calls == two.tool_calls
    assert one.tool_calls[0].call_id == "call_2_0"


def test_a4_scripted_rules_load_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "rules.json"
    path.write_text(json.dumps(RULES), "utf-8")
    assert len(ScriptedModel.from_json(path).rules) == len(RULES["rules"])


@pytest.mark.parametrize(
    "document",
    [
        "not json",
        "[]",
        json.dumps({"rules": [{"when": {"nonsense": 1}, "reply": {"text": "x"}}]}),
        json.dumps({"rules": [{"when": {}, "reply": {"frobnicate": True}}]}),
        json.dumps({"rules": [{"when": {}, "reply": {"error": "sometimes"}}]}),
        json.dumps({"rules": [{"reply": {"text": "x"}}]}),
        json.dumps({"rules": [{"when": {}, "reply": {"tool_calls": [{"arguments": {}}]}}]}),
    ],
)
def test_a4_scripted_rules_refuse_bad_documents(document: str) -> None:
    with pytest.raises((InvalidInputError, ValueError)):
        ScriptedModel.from_json(document)


def test_a4_rule_with_several_conditions_needs_all() -> None:
    rule = Rule({"text_contains": "a", "role": "user"}, {"text": "x"})
    assert rule.matches(user("abc"), ())
    assert not rule.matches(PromptMessage("assistant", "abc"), ())
    assert not rule.matches(user("xyz"), ())


def _message(seq: int, role: str) -> Message:
    return Message(ConversationId("c"), seq, MessageId(f"m{seq}"), None, role, "", (), None,
                   None, None, None, {}, 0)


def test_history_window_never_opens_inside_a_tool_exchange() -> None:
    cut = [_message(5, "tool"), _message(6, "assistant"), _message(7, "user"),
           _message(8, "assistant")]
    assert [m.seq for m in history_window(cut)] == [7, 8]
    assert history_window([_message(1, "assistant"), _message(2, "tool")]) == []
    whole = [_message(1, "user"), _message(2, "assistant")]
    assert history_window(whole) == whole


# -- B8: the scripted model's usage ----------------------------------------------------------------


async def test_b8_scripted_model_reports_its_estimate_of_four_characters_a_token() -> None:
    model = ScriptedModel(rules=[
        Rule({"text_equals": "go"}, {"tool_calls": [{"name": "shell", "arguments": {"c": 1}}]}),
    ])
    # system "s" (1) + "go" (2) = 3 characters in: 1 token; the call: 'shell{"c": 1}' (13): 4.
    called = await model.complete(request(user("go")))
    assert (called.input_tokens, called.output_tokens) == (1, 4)
    assert (called.cache_read_tokens, called.cache_write_tokens) == (None, None)
    # 1 + 9 characters in ("s" and "abcdefghi"): 3 tokens; the echo's 9 out: 3.
    echoed = await model.complete(request(user("abcdefghi")))
    assert (echoed.input_tokens, echoed.output_tokens) == (3, 3)
    again = await model.complete(request(user("abcdefghi")))
    assert (again.input_tokens, again.output_tokens) == (3, 3)  # the same on every run


async def test_b8_scripted_reply_sets_its_own_usage_also_on_a_failure() -> None:
    model = ScriptedModel(rules=[
        Rule({"text_equals": "cached"},
             {"text": "ok", "usage": {"input_tokens": 100, "cache_read_tokens": 80}}),
        Rule({"text_equals": "fail"},
             {"error": "retryable", "usage": {"input_tokens": 40, "output_tokens": 2}}),
    ])
    reply = await model.complete(request(user("cached")))
    assert (reply.input_tokens, reply.output_tokens, reply.cache_read_tokens,
            reply.cache_write_tokens) == (100, 1, 80, None)  # output still estimated: "ok"
    with pytest.raises(ModelError) as failed:
        await model.complete(request(user("fail")))
    assert (failed.value.input_tokens, failed.value.output_tokens) == (40, 2)


@pytest.mark.parametrize("usage", [{"tokens": 3}, {"input_tokens": -1}, {"input_tokens": "3"}])
def test_b8_scripted_usage_refuses_unknown_or_negative_counts(usage: object) -> None:
    with pytest.raises(InvalidInputError):
        ScriptedModel(default={"text": "x", "usage": usage})


async def test_b1_scripted_reply_streams_in_chunks() -> None:
    model = ScriptedModel.from_json({
        "rules": [
            {"when": {"text_contains": "story"},
             "reply": {"text": "abcdefghij", "chunks": 3, "chunk_delay": 0}},
            {"when": {"text_contains": "break"},
             "reply": {"text": "half", "chunks": 2, "error": "retryable"}},
        ],
        "default": {"text": "whole"},
    })
    pieces: list[str] = []
    reply = await model.complete(request(user("a story")), on_delta=pieces.append)
    assert (pieces, reply.text) == (["abcd", "efg", "hij"], "abcdefghij")

    pieces.clear()
    await model.complete(request(user("hello")), on_delta=pieces.append)
    assert pieces == ["whole"]  # one piece unless the rule says otherwise

    pieces.clear()
    with pytest.raises(ModelError) as failed:
        await model.complete(request(user("break off")), on_delta=pieces.append)
    assert (pieces, failed.value.kind) == (["ha", "lf"], ModelErrorKind.RETRYABLE)


def test_b1_scripted_chunks_are_checked() -> None:
    for bad in ({"text": "x", "chunks": 0}, {"text": "x", "chunks": "2"},
                {"text": "x", "chunk_delay": -1}):
        with pytest.raises(InvalidInputError):
            ScriptedModel(default=bad)
