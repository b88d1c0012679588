"""The feed's live messages between processes: what they say and how they are cut to size.

Four kinds, each one compact JSON object, sent by one hub and heard by every other hub on
the database (the store carries them; PostgreSQL bounds each one to a few kilobytes):

- a **delta** ``{"k": "d", "h": hub, "c": conversation, "r": run, "s": step, "o": offset,
  "t": text, "f": 1?}``: ``text`` at character ``offset`` of that step's answer; ``f`` when
  the model's reply is complete (no more text will come for it);
- a **discard** ``{"k": "x", "h", "c", "r", "s", "w": reason}``: that step's text will never
  be committed;
- a **snapshot request** ``{"k": "q", "h", "c"}``: a hub that began watching mid-answer asks
  whoever writes an answer in the conversation to send it again from offset 0;
- a **watch notice** ``{"k": "w", "h", "c"}``: a hub still watches the conversation. A hub
  sends the deltas and discards of a conversation only while another hub has said, by a
  snapshot request or a watch notice, that it watches it; watchers renew the notice.

A delta too large for one message is cut by characters, measuring the UTF-8 bytes of the
encoded text, into several deltas at successive offsets (the flag rides on the last).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

DELTA, DISCARD, REQUEST, WATCH = "d", "x", "q", "w"


@dataclass(slots=True)
class Live:
    """One live message, decoded (``kind`` is :data:`DELTA`, :data:`DISCARD`, :data:`REQUEST`
    or :data:`WATCH`; the fields a kind does not use keep their defaults)."""

    kind: str
    hub: str
    conversation_id: str
    run_id: str = ""
    step: int = 0
    offset: int = 0
    text: str = ""
    final: bool = False
    reason: str = ""


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _fields(live: Live) -> dict[str, Any]:
    fields: dict[str, Any] = {"k": live.kind, "h": live.hub, "c": live.conversation_id}
    if live.kind == DELTA:
        fields.update(r=live.run_id, s=live.step, o=live.offset, t=live.text)
        if live.final:
            fields["f"] = 1
    elif live.kind == DISCARD:
        fields.update(r=live.run_id, s=live.step, w=live.reason)
    return fields


def encode(live: Live, limit_bytes: int | None) -> list[str]:
    """``live`` as one or more messages of at most ``limit_bytes`` UTF-8 bytes each."""
    try:
        live.text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: one '?' each, so offsets stay as they are
        live = _part(live, live.offset, live.text.encode("utf-8", "replace").decode("utf-8"),
                     live.final)
    whole = _dumps(_fields(live))
    if limit_bytes is None or len(whole.encode("utf-8")) <= limit_bytes:
        return [whole]
    if live.kind != DELTA:
        raise ValueError(f"a {live.kind!r} message of {len(whole)} characters does not fit")
    budget = limit_bytes - len(_dumps(_fields(_part(live, 0, "", False))).encode("utf-8")) - 24
    if budget < 16:
        raise ValueError("the payload bound leaves no room for text")
    messages: list[str] = []
    offset, start, used = live.offset, 0, 0
    for index, char in enumerate(live.text):
        cost = len(_dumps(char).encode("utf-8")) - 2  # without the quotes
        if used + cost > budget:
            messages.append(_dumps(_fields(_part(live, offset, live.text[start:index], False))))
            offset += index - start
            start, used = index, 0
        used += cost
    messages.append(_dumps(_fields(_part(live, offset, live.text[start:], live.final))))
    return messages


def _part(live: Live, offset: int, text: str, final: bool) -> Live:
    return Live(DELTA, live.hub, live.conversation_id, live.run_id, live.step, offset, text,
                final)


def decode(message: str) -> Live | None:
    """A live message, or None for one this version does not understand (ignored)."""
    try:
        fields = json.loads(message)
        kind = fields["k"]
        live = Live(kind, str(fields["h"]), str(fields["c"]))
        if kind == DELTA:
            live.run_id, live.step = str(fields["r"]), int(fields["s"])
            live.offset, live.text = int(fields["o"]), str(fields["t"])
            live.final = bool(fields.get("f"))
        elif kind == DISCARD:
            live.run_id, live.step, live.reason = str(fields["r"]), int(fields["s"]), \
                str(fields["w"])
        elif kind not in (REQUEST, WATCH):
            return None
    except (ValueError, KeyError, TypeError):
        return None
    if live.offset < 0:
        return None
    return live


__all__ = ("DELTA", "DISCARD", "REQUEST", "WATCH", "Live", "decode", "encode")
