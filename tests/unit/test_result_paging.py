"""R3: paging by bytes covers the whole result, bounds every page, and never splits a UTF-8
code point -- for any text and any page size (and moves on even through bytes that are not
UTF-8 at all)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tidings.records.results import page_bounds


def pages(data: bytes, limit: int) -> list[bytes]:
    out: list[bytes] = []
    offset = 0
    while offset < len(data):
        start, end = page_bounds(data, offset, limit)
        assert start == offset
        assert end > start
        out.append(data[start:end])
        offset = end
    return out


@given(st.text(), st.integers(min_value=4, max_value=64))
def test_r3_text_pages_reassemble_and_decode_alone(text: str, limit: int) -> None:
    data = text.encode("utf-8", "surrogatepass")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return  # lone surrogates are not UTF-8; the binary property below covers them
    parts = pages(data, limit)
    assert b"".join(parts) == data
    for part in parts:
        assert len(part) <= limit
        part.decode("utf-8")  # a whole number of code points: never split


@given(st.binary(max_size=300), st.integers(min_value=4, max_value=32))
def test_r3_any_bytes_page_through_to_the_end(data: bytes, limit: int) -> None:
    parts = pages(data, limit)
    assert b"".join(parts) == data
    assert all(len(p) <= limit for p in parts)
