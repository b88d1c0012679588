"""R1, T1, T10: the capture policy, pure. Output is kept whole up to one budget shared by
stdout and stderr; beyond it each stream over its share keeps its head and tail, however its
writes were split and interleaved; the stored text states every drop in place and as spans;
an excerpt marks wherever it leaves something out; no cut falls inside a UTF-8 code point."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tidings.errors import InvalidInputError
from tidings.records.results import Drop
from tidings.tasks.capture import (
    STDERR_SEPARATOR,
    Capture,
    CaptureBuffer,
    drop_marker,
    envelope,
    excerpt,
    share,
)

Writes = list[tuple[int, bytes]]


def captured(writes: Writes, limit: int) -> tuple[Capture, Capture]:
    buffer = CaptureBuffer(limit)
    for stream, data in writes:
        (buffer.feed_stdout if stream == 0 else buffer.feed_stderr)(data)
        kept = buffer.stdout(), buffer.stderr()
        # The bound holds after every write, not only at the end.
        assert sum(len(c.head) + len(c.tail) for c in kept) <= limit
    return buffer.stdout(), buffer.stderr()


def streams(writes: Writes) -> tuple[bytes, bytes]:
    return (b"".join(d for s, d in writes if s == 0), b"".join(d for s, d in writes if s == 1))


writes_strategy = st.lists(
    st.tuples(st.integers(0, 1), st.binary(min_size=0, max_size=200)), max_size=40
)


# -- sharing the budget ------------------------------------------------------------------------


@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=4), st.integers(0, 20_000))
def test_r1_share_keeps_whole_what_fits_and_shares_the_rest_fairly(
    totals: list[int], budget: int
) -> None:
    shares = share(totals, budget)
    assert sum(shares) == min(budget, sum(totals))
    assert all(0 <= s <= t for s, t in zip(shares, totals, strict=True))
    # Max-min fair: a stream that did not get all it wrote got at least as much as any other
    # stream (give or take the odd byte of an even split).
    for s, t in zip(shares, totals, strict=True):
        if s < t:
            assert all(s >= other - 1 for other in shares)


@given(st.integers(0, 10_000), st.integers(0, 10_000), st.integers(1, 5_000),
       st.integers(0, 1), st.integers(0, 20_000))
def test_r1_a_stream_over_its_share_never_regains_room(
    out: int, err: int, more: int, grows: int, budget: int
) -> None:
    """What lets capture drop bytes as they come and still end at the final shares."""
    before = share((out, err), budget)
    after = share((out + more, err) if grows == 0 else (out, err + more), budget)
    for stream, total in enumerate((out, err)):
        if before[stream] < total:
            assert after[stream] <= before[stream]


# -- capture -----------------------------------------------------------------------------------


@given(writes_strategy, st.integers(0, 3_000))
def test_r1_capture_ends_at_the_shares_whatever_the_writes(writes: Writes, limit: int) -> None:
    out, err = captured(writes, limit)
    data = streams(writes)
    shares = share((len(data[0]), len(data[1])), limit)
    for capture, whole, kept in zip((out, err), data, shares, strict=True):
        assert capture.total_bytes == len(whole)
        if kept == len(whole):
            assert capture.head + capture.tail == whole
            assert not capture.truncated
        else:
            assert capture.head == whole[: kept - kept // 2]
            assert capture.tail == whole[len(whole) - kept // 2 :]
            assert capture.dropped_bytes == len(whole) - kept


def test_r1_capture_below_the_bound_is_whole() -> None:
    buffer = CaptureBuffer(300_000)
    for _ in range(50):
        buffer.feed_stdout(b"o" * 4_000)
        buffer.feed_stderr(b"e" * 10)
    assert buffer.stdout() == Capture(head=b"o" * 200_000, total_bytes=200_000)
    assert buffer.stderr() == Capture(head=b"e" * 500, total_bytes=500)


def test_r1_late_stderr_takes_its_share_from_stdout() -> None:
    buffer = CaptureBuffer(100)
    buffer.feed_stdout(bytes(range(200)))
    assert len(buffer.stdout().head) + len(buffer.stdout().tail) == 100
    buffer.feed_stderr(b"E" * 80)
    out, err = buffer.stdout(), buffer.stderr()
    assert (out.head, out.tail) == (bytes(range(25)), bytes(range(175, 200)))
    assert (err.head, err.tail, err.dropped_bytes) == (b"E" * 25, b"E" * 25, 30)


def test_r1_capture_limit_is_not_negative() -> None:
    with pytest.raises(InvalidInputError, match="negative"):
        CaptureBuffer(-1)


# -- the stored text -------------------------------------------------------------------------


def test_r1_drop_statement_says_how_many_bytes_and_where() -> None:
    drop = Drop("stdout", 1_048_576, 2_283_143)
    assert drop.dropped_bytes == 1_234_567
    assert drop.statement() == (
        "dropped 1,234,567 bytes of stdout between byte 1,048,576 and byte 2,283,143"
    )
    assert drop.statement().encode() in drop_marker(drop)
    with pytest.raises(InvalidInputError, match="at least one byte"):
        Drop("stdout", 5, 5)


def test_r1_envelope_within_the_bound_is_the_output_byte_for_byte() -> None:
    out = Capture(head=b"o" * 200_000, total_bytes=200_000)
    assert envelope(out, Capture(), 2 * 1024 * 1024) == (b"o" * 200_000, ())
    err = Capture(head=b"warning\n", total_bytes=8)
    assert envelope(out, err, 2 * 1024 * 1024) == (
        b"o" * 200_000 + STDERR_SEPARATOR + b"warning\n", ())


text_strategy = st.text(
    alphabet=st.characters(codec="utf-8", categories=("L", "N", "P", "S", "Zs")), max_size=400
)


@settings(max_examples=300)
@given(text_strategy, text_strategy, st.integers(1, 8), st.integers(1, 8),
       st.integers(300, 1_500))
@example("é" * 400, "", 4, 1, 1001)
@example("a✓" * 100, "🚀x" * 150, 3, 3, 777)
def test_r1_envelope_states_every_drop_and_keeps_the_rest_exactly(
    out_text: str, err_text: str, out_repeat: int, err_repeat: int, limit: int
) -> None:
    out_data = out_text.encode() * out_repeat
    err_data = err_text.encode() * err_repeat
    writes: Writes = [(0, out_data[i : i + 97]) for i in range(0, len(out_data), 97)]
    writes += [(1, err_data[i : i + 61]) for i in range(0, len(err_data), 61)]
    out, err = captured(writes, limit)
    text, drops = envelope(out, err, limit)
    assert len(text) <= limit
    text.decode("utf-8")  # no cut inside a code point, markers included
    separator = STDERR_SEPARATOR if err_data else b""
    if len(out_data) + len(err_data) + len(separator) <= limit:
        assert (text, drops) == (out_data + separator + err_data, ())
        return
    # Rebuild the text from the streams and the drops alone: it is exactly what was kept.
    rebuilt = []
    for name, data in (("stdout", out_data), ("stderr", err_data)):
        if name == "stderr" and not data:
            continue
        [*cut] = [d for d in drops if d.stream == name]
        if name == "stderr":
            rebuilt.append(separator)
        if cut:
            [drop] = cut
            rebuilt += [data[: drop.from_byte], drop_marker(drop), data[drop.to_byte :]]
        else:
            rebuilt.append(data)
    assert text == b"".join(rebuilt)
    assert drops  # over the bound: something was dropped, and said so


def test_r1_envelope_of_a_3_mib_stdout_fits_2_mib_and_says_where_it_cut() -> None:
    data = b"".join(b"%07d\n" % i for i in range(3 * 1024 * 1024 // 8))
    limit = 2 * 1024 * 1024
    out, err = captured([(0, data[i : i + 65_536]) for i in range(0, len(data), 65_536)], limit)
    text, [drop] = envelope(out, err, limit)
    assert limit - 200 <= len(text) <= limit
    assert drop.stream == "stdout"
    assert text.startswith(data[: drop.from_byte])
    assert text.endswith(data[drop.to_byte :])
    assert drop.from_byte == pytest.approx(1024 * 1024, abs=200)
    statement = re.search(rb"\[\.\.\. (dropped [^\]]*) \.\.\.\]", text)
    assert statement is not None
    assert statement.group(1).decode() == drop.statement()
    assert statement.start() == drop.from_byte + 1  # in place, after the head's last byte


# -- excerpts ----------------------------------------------------------------------------------


@given(writes_strategy, st.integers(128, 1_000))
def test_r1_excerpt_is_bounded_and_marks_every_elision(writes: Writes, limit: int) -> None:
    out, err = captured(writes, 4_000)
    out_data, err_data = streams(writes)
    text, elided = excerpt(out, err, limit)
    assert len(text) <= limit
    whole = out_data + (STDERR_SEPARATOR + err_data if err_data else b"")
    if not elided:
        assert text == whole
        return
    # Each part that is not whole carries a marker naming how much it left out. A stream may
    # itself contain the separator's bytes, so the excerpt is read at each place it could
    # have been put: one of them must account for both parts.
    if not err_data:
        assert _marked(text, out_data), text
        return
    starts = [m.start() for m in re.finditer(re.escape(STDERR_SEPARATOR), text)]
    assert any(_marked(text[:i], out_data) and _marked(text[i + len(STDERR_SEPARATOR):], err_data)
               for i in starts), text


def _marked(part: bytes, data: bytes) -> bool:
    """``part`` is ``data`` whole, or cut with a marker that names exactly what it left out."""
    if part == data:
        return True
    omitted = re.findall(rb"\n\[\.\.\. (\d+) bytes omitted \.\.\.\]\n", part)
    if not omitted:
        return False
    shown = len(part) - len(b"\n[...  bytes omitted ...]\n") - len(omitted[-1])
    return int(omitted[-1]) == len(data) - shown


def test_r1_excerpt_shares_its_room_with_stderr() -> None:
    out = Capture(head=b"o" * 5_000, total_bytes=5_000)
    err = Capture(head=b"fatal: disk full\n", total_bytes=17)
    text, elided = excerpt(out, err, 2_048)
    assert elided
    assert len(text) <= 2_048
    assert text.endswith(STDERR_SEPARATOR + b"fatal: disk full\n")  # the short stream whole
    assert b"bytes omitted" in text.split(STDERR_SEPARATOR)[0]
