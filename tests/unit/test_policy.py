"""Pure policy, no database: backoff, dead-lettering, payload admission, identifiers."""

from __future__ import annotations

import json
import random
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.clock import to_us
from tidings.errors import InvalidInputError, PayloadTooLargeError
from tidings.records.outbox import OutboxConfig
from tidings.support.policy import (
    MAX_ID_LENGTH,
    MAX_PAYLOAD_DEPTH,
    SECRET_KEYS,
    backoff,
    backoff_us,
    check_id,
    check_signal_payload,
    dead_letter_due,
    encode_json,
    is_secret_key,
)
from tidings.tasks.service import END_RETRY_BASE, END_RETRY_CAP
from tidings.turns.plan import TurnConfig

durations = st.integers(min_value=1, max_value=10**12).map(lambda us: timedelta(microseconds=us))
attempts = st.integers(min_value=1, max_value=200)
seeds = st.integers(min_value=0, max_value=2**32 - 1)


def step_us(attempt: int, base: timedelta, cap: timedelta) -> int:
    """The un-jittered exponential step: base * 2**(attempt-1), capped."""
    return min(to_us(cap), to_us(base) << (attempt - 1))


# -- S8: bounded exponential backoff with jitter ---------------------------------------------


@given(attempt=attempts, base=durations, cap=durations, seed=seeds)
def test_s8_backoff_lies_between_half_step_and_step(
    attempt: int, base: timedelta, cap: timedelta, seed: int
) -> None:
    step = step_us(attempt, base, cap)
    delay = backoff_us(attempt, random.Random(seed), base=base, cap=cap)
    assert step // 2 <= delay <= step
    assert delay <= to_us(cap)  # never past the cap, however many attempts


@given(attempt=attempts, base=durations, cap=durations)
def test_s8_backoff_is_never_an_immediate_retry(
    attempt: int, base: timedelta, cap: timedelta
) -> None:
    class Lowest(random.Random):
        def random(self) -> float:
            return 0.0

    class Highest(random.Random):
        def random(self) -> float:
            return 1.0 - 2**-53

    step = step_us(attempt, base, cap)
    low = backoff_us(attempt, Lowest(), base=base, cap=cap)
    high = backoff_us(attempt, Highest(), base=base, cap=cap)
    assert low == step // 2  # the jitter floor is half a step: retries never bunch at zero
    assert low <= high <= step
    if step >= 2:
        assert low > 0


@given(base=durations, cap=durations, first=attempts, second=attempts)
def test_s8_backoff_step_grows_with_attempts_until_the_cap(
    base: timedelta, cap: timedelta, first: int, second: int
) -> None:
    """With the jitter at its top, the delay is monotone in the attempt number."""

    class Highest(random.Random):
        def random(self) -> float:
            return 1.0 - 2**-53

    lo, hi = sorted((first, second))
    earlier = backoff_us(lo, Highest(), base=base, cap=cap)
    later = backoff_us(hi, Highest(), base=base, cap=cap)
    assert earlier <= later <= to_us(cap)


def test_s8_backoff_doubles_then_holds_at_the_cap() -> None:
    base, cap = timedelta(seconds=1), timedelta(seconds=10)
    steps = [step_us(a, base, cap) for a in range(1, 7)]
    assert steps == [1_000_000, 2_000_000, 4_000_000, 8_000_000, 10_000_000, 10_000_000]
    rng = random.Random(7)
    for attempt, step in enumerate(steps, start=1):
        delay = backoff_us(attempt, rng, base=base, cap=cap)
        assert step // 2 <= delay <= step


def test_s8_backoff_of_huge_attempt_numbers_stays_capped() -> None:
    cap = timedelta(minutes=5)
    delay = backoff_us(10**6, random.Random(1), base=timedelta(seconds=1), cap=cap)
    assert to_us(cap) // 2 <= delay <= to_us(cap)


@given(seed=seeds, attempt=attempts)
def test_s8_backoff_is_deterministic_given_its_random_source(seed: int, attempt: int) -> None:
    base, cap = timedelta(seconds=1), timedelta(minutes=5)
    first = backoff_us(attempt, random.Random(seed), base=base, cap=cap)
    assert backoff_us(attempt, random.Random(seed), base=base, cap=cap) == first


@pytest.mark.parametrize("attempt", [0, -1])
def test_s8_backoff_attempts_are_one_based(attempt: int) -> None:
    with pytest.raises(ValueError, match="1-based"):
        backoff_us(attempt, random.Random(0), base=timedelta(seconds=1), cap=timedelta(1))


def test_s8_backoff_jitter_spreads_retries() -> None:
    rng = random.Random(3)
    delays = {
        backoff_us(4, rng, base=timedelta(seconds=1), cap=timedelta(minutes=5)) for _ in range(50)
    }
    assert len(delays) > 40  # jittered, not one synchronised retry time


@given(attempt=attempts, base=durations | st.just(timedelta(0)), cap=durations, seed=seeds)
def test_s8_backoff_is_one_policy_in_either_unit(
    attempt: int, base: timedelta, cap: timedelta, seed: int
) -> None:
    delay = backoff(attempt, random.Random(seed), base=base, cap=cap)
    assert to_us(delay) == backoff_us(attempt, random.Random(seed), base=base, cap=cap)
    assert timedelta(0) <= delay <= cap


def _retry_configs() -> list[tuple[str, timedelta, timedelta]]:
    outbox, turns = OutboxConfig(), TurnConfig()
    return [
        ("delivery", outbox.backoff_base, outbox.backoff_cap),
        ("model_call", turns.retry_base, turns.retry_cap),
        ("task_end", END_RETRY_BASE, END_RETRY_CAP),
    ]


@pytest.mark.parametrize(("what", "base", "cap"), _retry_configs(), ids=lambda v: str(v))
@given(attempt=attempts, seed=seeds)
def test_s8_every_retry_of_tidings_waits_between_half_a_step_and_a_step(
    what: str, base: timedelta, cap: timedelta, attempt: int, seed: int
) -> None:
    """Delivery retries, model calls asked again and task ends committed again all back off by
    the one policy: never at once, never past their cap, growing until it."""
    delay = to_us(backoff(attempt, random.Random(seed), base=base, cap=cap))
    step = step_us(attempt, base, cap)
    assert 0 < step // 2 <= delay <= step <= to_us(cap), what


def test_a4_model_retries_with_a_zero_base_do_not_wait() -> None:
    # Tests and benches run model retries with retry_base=0: the policy must not pause them.
    for attempt in range(1, 10):
        delay = backoff(attempt, random.Random(attempt), base=timedelta(0), cap=timedelta(8))
        assert delay == timedelta(0)


# -- S8: when a failed delivery becomes a dead letter ----------------------------------------


@given(tried=st.integers(min_value=0, max_value=100),
       budget=st.integers(min_value=1, max_value=100))
def test_s8_dead_letter_due_exactly_when_the_budget_is_spent(tried: int, budget: int) -> None:
    assert dead_letter_due(tried, max_attempts=budget, permanent=False) == (tried >= budget)


@given(tried=st.integers(min_value=0, max_value=100),
       budget=st.integers(min_value=1, max_value=100))
def test_s8_permanent_failure_is_always_a_dead_letter(tried: int, budget: int) -> None:
    assert dead_letter_due(tried, max_attempts=budget, permanent=True)


# -- S10: bounded payloads as compact JSON ---------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(value=json_values)
def test_s10_encode_json_round_trips_and_counts_utf8_bytes(value: Any) -> None:
    text, size = encode_json(value, "payload", limit_bytes=10**9)
    assert json.loads(text) == value
    assert size == len(text.encode("utf-8"))
    assert size <= len(json.dumps(value).encode("utf-8"))  # compact: never larger


@given(text=st.text(min_size=1, max_size=50))
def test_s10_encode_json_limit_is_in_utf8_bytes_inclusive(text: str) -> None:
    _, size = encode_json({"t": text}, "payload", limit_bytes=10**6)
    assert encode_json({"t": text}, "payload", limit_bytes=size)[1] == size  # at the limit: ok
    with pytest.raises(PayloadTooLargeError) as refused:
        encode_json({"t": text}, "payload", limit_bytes=size - 1)
    assert (refused.value.size_bytes, refused.value.limit_bytes) == (size, size - 1)
    assert refused.value.code == "payload_too_large"


def test_s10_encode_json_keeps_non_ascii_as_utf8() -> None:
    text, size = encode_json({"k": "é"}, "payload", limit_bytes=100)
    assert text == '{"k":"é"}'
    assert size == len('{"k":""}') + 2  # é is two bytes, not a six-byte \\u escape


@pytest.mark.parametrize(
    "value",
    [float("nan"), float("inf"), {"k": object()}, {1j: "x"}, {"s": {1, 2}}, b"bytes", "\ud800"],
    ids=["nan", "inf", "object", "complex-key", "set", "bytes", "lone-surrogate"],
)
def test_s10_encode_json_refuses_what_is_not_plain_json(value: Any) -> None:
    with pytest.raises(InvalidInputError) as refused:
        encode_json(value, "payload", limit_bytes=10**6)
    assert refused.value.code == "invalid_input"
    assert "payload" in str(refused.value)


def test_s10_encode_json_refuses_a_cycle() -> None:
    looped: dict[str, Any] = {}
    looped["self"] = looped
    with pytest.raises(InvalidInputError):
        encode_json(looped, "payload", limit_bytes=10**6)


# -- S11: signals are observations: bounded metadata, never secrets ---------------------------

safe_keys = st.text(min_size=1, max_size=12).filter(lambda k: not is_secret_key(k))
leaves = st.none() | st.booleans() | st.integers() | st.text(max_size=10)
trees = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(safe_keys, inner, max_size=3),
    max_leaves=12,
)


def levels(value: Any) -> int:
    """How deep a value reaches: a scalar is one level, a container one more than its items."""
    if isinstance(value, dict):
        return 1 + max(map(levels, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(levels, value), default=0)
    return 1


@given(payload=st.dictionaries(safe_keys, trees, max_size=4))
def test_s11_payload_is_admitted_exactly_when_its_depth_is_bounded(
    payload: dict[str, Any],
) -> None:
    if levels(payload) <= MAX_PAYLOAD_DEPTH:
        check_signal_payload(payload)
    else:
        with pytest.raises(InvalidInputError, match="nest at most"):
            check_signal_payload(payload)


def test_s11_payload_depth_boundary() -> None:
    assert MAX_PAYLOAD_DEPTH == 4
    check_signal_payload({"task": {"exit": {"code": 0}}})  # object, object, object, value
    check_signal_payload({"a": [["x"]], "b": {"c": []}})
    with pytest.raises(InvalidInputError, match="nest at most"):
        check_signal_payload({"task": {"exit": {"code": {"value": 0}}}})
    with pytest.raises(InvalidInputError, match="nest at most"):
        check_signal_payload({"a": [[["x"]]]})


@given(value=leaves | st.lists(leaves))
def test_s11_payload_must_be_an_object(value: Any) -> None:
    with pytest.raises(InvalidInputError, match="JSON object"):
        check_signal_payload(value)


@given(secret=st.sampled_from(sorted(SECRET_KEYS)), upper=st.booleans(),
       path=st.lists(st.sampled_from(["task", "result", "ref"]), max_size=2))
def test_s11_secret_keys_are_refused_at_any_depth_and_case(
    secret: str, upper: bool, path: list[str]
) -> None:
    key = secret.upper() if upper else secret
    payload: dict[str, Any] = {key: "hunter2"}
    for name in reversed(path):
        payload = {name: payload}
    with pytest.raises(InvalidInputError, match="never secrets") as refused:
        check_signal_payload(payload)
    assert "hunter2" not in str(refused.value)  # the refusal does not echo the secret


def test_s11_secret_key_inside_a_list_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="never secrets"):
        check_signal_payload({"items": [{"ok": 1}, {"api_key": "x"}]})


def test_s11_references_to_secrets_by_other_names_are_fine() -> None:
    check_signal_payload({"task_key": "t1", "result_ref": "res_1", "token_count": 12})


@pytest.mark.parametrize(
    "key",
    ["db_password", "clientSecret", "github_token", "x-api-key", "aws_secret_access_key",
     "AWS_ACCESS_KEY", "userCredentials", "Set-Cookie", "OPENAI_API_KEY", "authToken"],
)
def test_s11_secret_keys_are_recognised_by_their_words(key: str) -> None:
    assert is_secret_key(key)
    with pytest.raises(InvalidInputError, match="never secrets"):
        check_signal_payload({"task": {key: "hunter2"}})


@pytest.mark.parametrize(
    "key", ["task_key", "token_count", "completion_tokens", "result_ref", "keyboard", "secretary"]
)
def test_s11_ordinary_keys_that_mention_secret_words_are_fine(key: str) -> None:
    assert not is_secret_key(key)
    check_signal_payload({key: 1})


def test_s11_non_string_keys_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="keys must be strings"):
        check_signal_payload({"a": {1: "x"}})


# -- identifiers -----------------------------------------------------------------------------

CONTROL = [chr(c) for c in [*range(32), 127]]
id_chars = st.characters(exclude_categories=["Cs"], exclude_characters=CONTROL)


@given(value=st.text(id_chars, min_size=1, max_size=MAX_ID_LENGTH))
def test_s11_check_id_accepts_bounded_printable_text(value: str) -> None:
    assert check_id(value, "conversation id") is value


@given(value=st.text(id_chars, min_size=MAX_ID_LENGTH + 1, max_size=MAX_ID_LENGTH + 20))
def test_s11_check_id_refuses_overlong_ids(value: str) -> None:
    with pytest.raises(InvalidInputError, match="conversation id"):
        check_id(value, "conversation id")


@given(prefix=st.text(id_chars, max_size=5), control=st.sampled_from(CONTROL),
       suffix=st.text(id_chars, max_size=5))
def test_s11_check_id_refuses_control_characters(prefix: str, control: str, suffix: str) -> None:
    with pytest.raises(InvalidInputError, match="control characters"):
        check_id(prefix + control + suffix, "owner")


@pytest.mark.parametrize("value", ["", None, 7, b"conv", "conv-\ud800"],
                         ids=["empty", "none", "int", "bytes", "lone-surrogate"])
def test_s11_check_id_refuses_non_text(value: Any) -> None:
    with pytest.raises(InvalidInputError):
        check_id(value, "idempotency key")
