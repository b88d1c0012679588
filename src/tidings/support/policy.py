"""Pure policy over plain values: tested without a database, applied by the outbox in a unit.

Nothing here touches the store or the clock; every function is deterministic given its inputs
(the jitter takes its random source as an argument).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import random
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol, TypeVar

from tidings.clock import to_us
from tidings.errors import InvalidInputError, PayloadTooLargeError
from tidings.types import ConversationStatus, GoalStatus, Origin, Profile, StartKind

_SLUG = re.compile(r"[a-z][a-z0-9_.:-]{0,63}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
SECRET_KEYS = frozenset(
    {
        "password", "passwd", "secret", "api_key", "apikey", "token", "access_token",
        "refresh_token", "authorization", "private_key", "credential", "credentials", "cookie",
    }
)
"""Examples of keys a signal payload never carries; ``is_secret_key`` decides by its words."""

_SECRET_WORDS = frozenset(
    {"password", "passwd", "passphrase", "secret", "credential", "credentials", "cookie",
     "authorization", "apikey"}
)
_SECRET_PAIRS = frozenset({("api", "key"), ("private", "key"), ("access", "key")})
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
MAX_PAYLOAD_DEPTH = 4
MAX_ID_LENGTH = 200
MAX_INT64 = 2**63 - 1
"""The largest integer both databases hold (a signed 64-bit integer)."""


def backoff(attempt: int, rng: random.Random, *, base: timedelta, cap: timedelta) -> timedelta:
    """Delay before retry number ``attempt`` (1-based): capped exponential, "equal jitter".

    The one backoff of tidings: a delivery's next claim, a model call asked again, a task's end
    committed again after a store fault all wait this long. The exponential step is
    ``base * 2**(attempt-1)`` capped at ``cap``; the delay is drawn uniformly from its upper
    half, so retries never bunch at zero and never exceed the cap. Exact to the microsecond.
    """
    if attempt < 1:
        raise ValueError("attempt is 1-based")
    step = min(to_us(cap), to_us(base) << min(attempt - 1, 62))
    half = step // 2
    return timedelta(microseconds=half + int(rng.random() * (step - half)))


def backoff_us(attempt: int, rng: random.Random, *, base: timedelta, cap: timedelta) -> int:
    """:func:`backoff` in microseconds, for the store's integer clock."""
    return to_us(backoff(attempt, rng, base=base, cap=cap))


def dead_letter_due(attempts: int, *, max_attempts: int, permanent: bool) -> bool:
    """Whether a failed delivery goes to dead_letter instead of back to ready."""
    return permanent or attempts >= max_attempts


def check_slug(value: str, what: str) -> str:
    """A short lowercase code: event types, failure codes, operation kinds."""
    if not isinstance(value, str) or _SLUG.fullmatch(value) is None:
        raise InvalidInputError(
            f"{what} must be 1-64 characters of a-z, 0-9, '_', '.', ':' or '-', "
            f"starting with a letter; got {value!r}"
        )
    return value


def check_id(value: str, what: str) -> str:
    """An opaque identifier: non-empty, bounded, no control characters, valid UTF-8."""
    if not isinstance(value, str) or not value or len(value) > MAX_ID_LENGTH:
        raise InvalidInputError(f"{what} must be a string of 1-{MAX_ID_LENGTH} characters")
    if _CONTROL.search(value):
        raise InvalidInputError(f"{what} must not contain control characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(f"{what} is not valid UTF-8") from None
    return value


def check_cursor(value: str, what: str) -> str:
    """Where a page starts: empty (from the start) or an id, by :func:`check_id`'s rules."""
    return value if value == "" else check_id(value, what)


def check_position(value: int, what: str) -> int:
    """A journal sequence, a byte offset or a time in microseconds: an integer in
    ``[0, MAX_INT64]``, what both databases hold."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INT64:
        raise InvalidInputError(f"{what} must be an integer between 0 and {MAX_INT64}")
    return value


def encode_json(value: Any, what: str, *, limit_bytes: int) -> tuple[str, int]:
    """Serialise ``value`` as compact JSON; its text and its size in UTF-8 bytes."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        size = len(text.encode("utf-8"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidInputError(f"{what} is not plain JSON: {exc}") from None
    except UnicodeEncodeError:
        raise InvalidInputError(f"{what} is not valid UTF-8") from None
    if size > limit_bytes:
        raise PayloadTooLargeError(size, limit_bytes)
    return text, size


@functools.lru_cache(maxsize=4096)  # payloads repeat their keys: judge each once
def is_secret_key(key: str) -> bool:
    """Whether a payload key names a secret, judged by its words (snake, kebab or camel case).

    ``db_password``, ``clientSecret``, ``github_token``, ``x-api-key`` and ``aws_access_key``
    name secrets; ``task_key``, ``token_count`` and ``result_ref`` do not. A key ending in the
    word ``token`` is a credential; ``token`` elsewhere (a count of tokens) is not.
    """
    words = [w.lower() for w in _WORD.findall(key)]
    if not words:
        return False
    if any(w in _SECRET_WORDS for w in words) or words[-1] == "token":
        return True
    return any(pair in _SECRET_PAIRS for pair in itertools.pairwise(words))


def check_signal_payload(payload: Any) -> None:
    """Signals are observations: bounded metadata and references, never secrets (S11).

    A payload is a JSON object at most ``MAX_PAYLOAD_DEPTH`` deep whose keys never name a secret
    (``password``, ``db_password``, ``api_key``, ``github_token``, …; see ``is_secret_key``).
    Raw tool arguments and raw results belong in a result envelope, referenced from the signal.
    """
    if not isinstance(payload, dict):
        raise InvalidInputError("a signal payload must be a JSON object")
    _check_payload_value(payload, 1)


def _check_payload_value(value: Any, depth: int) -> None:
    """:func:`check_signal_payload` of one value at ``depth`` (a function of the module: a
    nested one calling itself would be a reference cycle made at every publish)."""
    if depth > MAX_PAYLOAD_DEPTH:
        raise InvalidInputError(
            f"a signal payload may nest at most {MAX_PAYLOAD_DEPTH} levels; "
            "put bulk data in a result envelope and reference it"
        )
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidInputError("signal payload keys must be strings")
            if is_secret_key(key):
                raise InvalidInputError(
                    f"signal payloads carry references, never secrets: key {key!r} refused"
                )
            _check_payload_value(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check_payload_value(item, depth + 1)


def fenced_json(value: object) -> str:
    """``value`` as one line of JSON that no content can break out of.

    ASCII only (control characters, line breaks and every non-ASCII character are escaped), with
    ``<``, ``>`` and ``&`` escaped too: whatever the value holds -- a fake closing tag, a line
    that starts with "SYSTEM:", invalid UTF-8 already replaced -- it stays one JSON value inside
    the fence it is placed in, and reads as data.
    """
    text = json.dumps(value, ensure_ascii=True, sort_keys=True, separators=(",", ":"))
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


# -- the door ----------------------------------------------------------------------------------


def check_text(value: object, what: str, *, limit_bytes: int) -> str:
    """Words for the transcript: a string, valid UTF-8, no NUL, at most ``limit_bytes``."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be a string")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidInputError(f"{what} is not valid UTF-8") from None
    if "\x00" in value:
        raise InvalidInputError(f"{what} must not contain NUL characters")
    if size > limit_bytes:
        raise PayloadTooLargeError(size, limit_bytes)
    return value


class _Ordered(Protocol):
    @property
    def origin(self) -> Origin: ...

    @property
    def queue_position(self) -> int: ...


OrderedT = TypeVar("OrderedT", bound=_Ordered)


def read_order(inputs: Iterable[OrderedT]) -> list[OrderedT]:
    """The order a turn reads queued inputs in (M2): the kernel's rows first, then arrival.

    The model finishes absorbing what it asked for before it takes new instructions.
    ``queue_position`` stays the arrival number; only the reading order changes.
    """
    return sorted(inputs, key=lambda i: (not i.origin.is_kernel, i.queue_position))


# -- the coordinator ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StartState:
    """What a start decision reads, under the conversation's lock."""

    status: ConversationStatus
    goal_status: GoalStatus
    suppressed: bool
    awaiting_person: bool
    slot_free: bool
    person_inputs: bool
    agent_inputs: bool
    kernel_inputs: bool
    ready_signals: bool
    notifications: bool = False


@dataclass(frozen=True, slots=True)
class StartDecision:
    """Run a turn for ``trigger``, or yield; ``yielded`` says why each other start gave way."""

    trigger: StartKind | None
    reason: str | None
    yielded: tuple[tuple[StartKind, str], ...] = ()


def decide_start(state: StartState, kinds: frozenset[StartKind]) -> StartDecision:
    """Whether a turn starts now and on whose behalf (C2, C3, C6, C8).

    Queued inputs are served first, a person's before anything else; a kernel receipt before an
    automatic continuation. Automatic advancement (mail, wake-ups, goal checkpoints) waits while
    continuation is suppressed after a stop, and while a person's word is awaited after model
    retries ran out. A wake-up with nothing behind it is stale and starts nothing (C4).
    """
    if state.status is ConversationStatus.TOMBSTONED:
        return StartDecision(None, "deleted", tuple((k, "deleted") for k in sorted(kinds)))
    if not state.slot_free:
        return StartDecision(None, "slot_busy")
    trigger: StartKind | None = None
    reason: str | None = None
    if state.person_inputs:
        trigger = StartKind.PERSON
    elif state.agent_inputs:
        trigger = StartKind.AGENT
    else:
        held = (
            "suppressed" if state.suppressed
            else "awaiting_person" if state.awaiting_person
            else None
        )
        if state.kernel_inputs:
            trigger, reason = (None, held) if held else (StartKind.MAIL, None)
        elif state.ready_signals or state.notifications:
            # A fact the runtime learned (a signal, a task's delivered notification) continues
            # the conversation automatically, unless that is suppressed, awaits a person, or
            # its goal is paused or blocked (C3).
            if held is None and state.goal_status in (GoalStatus.PAUSED, GoalStatus.BLOCKED):
                held = f"goal_{state.goal_status.value}"
            trigger, reason = (None, held) if held else (StartKind.WAKE, None)
        elif StartKind.GOAL in kinds:
            if held:
                reason = held
            elif state.goal_status is not GoalStatus.ACTIVE:
                reason = f"goal_{state.goal_status.value}"
            else:
                trigger = StartKind.GOAL
        else:
            reason = "nothing_to_do"
    yielded: list[tuple[StartKind, str]] = []
    for kind in sorted(kinds):
        if kind is trigger or not kind.automatic:
            continue
        if trigger is StartKind.PERSON:
            yielded.append((kind, "person_priority"))
        elif trigger is not None:
            yielded.append((kind, "another_start_queued"))
        else:
            yielded.append((kind, reason or "nothing_to_do"))
    return StartDecision(trigger, reason, tuple(yielded))


PASSIVE_SIGNAL_PREFIXES = ("config.", "approval.", "job.")
"""Signal types that never wake a conversation by themselves (L3): the next turn reads them.
The one source of the rule: the store writes these prefixes into its ``has_ready_signals`` query
(``tidings.store.queries.wakes_sql``)."""


def wakes(signal_type: str) -> bool:
    """Whether a signal of this type wakes its conversation (L3): background completions and
    restarts do; config, approval and job events stay passive."""
    return not signal_type.startswith(PASSIVE_SIGNAL_PREFIXES)


APPROVAL_STRICTNESS = {"never": 0, "writes": 1, "always": 2}


def frozen_environment(profile: Profile) -> dict[str, Any]:
    """What a receipt keeps of the mailing run's profile (M5): model intent and fallbacks, the
    explicit tool list (an empty one stays empty) and the approval mode."""
    return {"model": profile.model, "fallbacks": list(profile.fallbacks),
            "tools": list(profile.tools), "approval_mode": profile.approval_mode}


def receipt_profile(current: Profile, environment: Mapping[str, Any]) -> Profile:
    """The profile a receipt's turn runs on (M5): the frozen model and fallbacks; the frozen
    tools that the answering profile still declares (an empty list stays empty); the stricter
    of the frozen and the current approval mode. Later profile changes move none of it."""
    frozen_mode = str(environment.get("approval_mode", "never"))
    mode = max((frozen_mode, current.approval_mode),
               key=lambda m: APPROVAL_STRICTNESS.get(m, 2))
    tools = tuple(t for t in environment.get("tools", ()) if t in current.tools)
    return dataclasses.replace(
        current, model=str(environment.get("model", current.model)),
        fallbacks=tuple(str(m) for m in environment.get("fallbacks", ())),
        tools=tools, approval_mode=mode,
    )
