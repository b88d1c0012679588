"""B1: the live messages between processes fit PostgreSQL's payload bound however the text
is made, and a hub rebuilds a draft from them -- overlaps add only what is new, a piece past
a gap is refused (and the writer asked for the draft again)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from tidings.feed.drafts import RemoteDrafts
from tidings.feed.wire import DELTA, DISCARD, REQUEST, Live, decode, encode
from tidings.store.feed import LIVE_PREFIX, PAYLOAD_BYTES

LIMIT = PAYLOAD_BYTES - len(LIVE_PREFIX)


@given(st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=6000),
       st.integers(min_value=0, max_value=10**6), st.booleans())
def test_b1_a_delta_is_cut_to_the_payload_bound_and_rebuilt(
    text: str, offset: int, final: bool
) -> None:
    live = Live(DELTA, "feed_1", "conv_1", "run_1", 3, offset, text * 3, final)
    messages = encode(live, LIMIT)
    assert all(len(m.encode("utf-8")) <= LIMIT for m in messages)
    parts = [decode(m) for m in messages]
    rebuilt, at = "", offset
    for part in parts:
        assert part is not None
        assert (part.kind, part.run_id, part.step, part.offset) == (DELTA, "run_1", 3, at)
        rebuilt += part.text
        at += len(part.text)
    assert rebuilt == text * 3
    assert [p.final for p in parts if p is not None] == [False] * (len(parts) - 1) + [final]


def test_b1_wide_characters_and_escapes_are_measured_in_bytes() -> None:
    text = ("é€😀\"\\\n\x00" * 3000)
    messages = encode(Live(DELTA, "h", "c", "r", 1, 0, text), LIMIT)
    assert len(messages) > 1
    assert all(len(m.encode("utf-8")) <= LIMIT for m in messages)
    assert "".join(json.loads(m)["t"] for m in messages) == text


def test_b1_other_kinds_and_unknown_messages() -> None:
    discard = decode(encode(Live(DISCARD, "h", "c", "r", 2, reason="stopped"), LIMIT)[0])
    assert discard is not None
    assert (discard.kind, discard.run_id, discard.step, discard.reason) == (
        DISCARD, "r", 2, "stopped")
    request = decode(encode(Live(REQUEST, "h", "c"), LIMIT)[0])
    assert request is not None
    assert (request.kind, request.conversation_id) == (REQUEST, "c")
    for junk in ("", "{", '{"k":"z","h":"h","c":"c"}', '{"k":"d","h":"h"}', "[1]"):
        assert decode(junk) is None
    # A lone surrogate cannot travel as UTF-8: it goes as '?', so offsets stay in step.
    [odd] = encode(Live(DELTA, "h", "c", "r", 1, 0, "a\ud800b"), LIMIT)
    decoded = decode(odd)
    assert decoded is not None
    assert decoded.text == "a?b"


def test_b1_remote_drafts_merge_pieces_once_and_refuse_gaps() -> None:
    drafts = RemoteDrafts()
    key = ("run_1", 1)
    first = drafts.merge(key, 0, "Once ", False)
    assert (first.offset, first.text, first.missing) == (0, "Once ", False)
    again = drafts.merge(key, 0, "Once up", False)  # overlaps: only the new part
    assert (again.offset, again.text) == (5, "up")
    past = drafts.merge(key, 20, "late", False)  # a piece past a gap
    assert past.missing
    assert past.text == ""
    assert drafts.snapshot() == [(key, "Once up")]
    end = drafts.merge(key, 7, "on a time", True)  # the last piece ends the draft here
    assert (end.offset, end.text) == (7, "on a time")
    assert drafts.snapshot() == []
    unknown = drafts.merge(("run_2", 1), 4, "mid", False)  # began before this hub heard it
    assert unknown.missing
    drafts.merge(("run_3", 1), 0, "x", False)
    drafts.merge(("run_3", 2), 0, "y", False)
    assert sorted(drafts.drop_run("run_3")) == [("run_3", 1), ("run_3", 2)]
