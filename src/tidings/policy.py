"""Pure policy over plain values: tested without a database, applied by the outbox in a unit.

Nothing here touches the store or the clock; every function is deterministic given its inputs
(the jitter takes its random source as an argument).
"""

from __future__ import annotations

import itertools
import json
import random
import re
from datetime import timedelta
from typing import Any

from tidings.clock import to_us
from tidings.errors import InvalidInputError, PayloadTooLargeError

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


def backoff_us(attempt: int, rng: random.Random, *, base: timedelta, cap: timedelta) -> int:
    """Delay before retry number ``attempt`` (1-based): capped exponential, "equal jitter".

    The exponential step is ``base * 2**(attempt-1)`` capped at ``cap``; the delay is drawn
    uniformly from its upper half, so retries never bunch at zero and never exceed the cap.
    """
    if attempt < 1:
        raise ValueError("attempt is 1-based")
    step = min(to_us(cap), to_us(base) << min(attempt - 1, 62))
    half = step // 2
    return half + int(rng.random() * (step - half))


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

    def walk(value: Any, depth: int) -> None:
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
                walk(item, depth + 1)
        elif isinstance(value, list):
            for item in value:
                walk(item, depth + 1)

    walk(payload, 1)
