"""Bounded capture of a process's output: one budget for stdout and stderr, every byte counted.

A process's two streams share one budget of kept bytes. While they fit, both are kept whole.
Once they do not, the budget is shared out by :func:`share` (a stream that needs less than an
even share keeps all of it, the other gets the rest), and a stream over its share keeps its
head and its tail -- half of its share each -- and counts what lies between as dropped.

However much a process writes, a capture never holds more than its budget (plus the one chunk
being read). And nothing is lost silently: :func:`envelope` builds the stored text with a marker
at each cut and returns the cuts as :class:`~tidings.records.results.Drop` spans;
:func:`excerpt` builds a bounded view with a marker wherever it leaves something out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tidings.errors import InvalidInputError
from tidings.records.results import Drop

STDOUT = "stdout"
STDERR = "stderr"
STDERR_SEPARATOR = b"\n[stderr]\n"
"""Between stdout and stderr, in a stored result and in an excerpt (only if stderr is not
empty)."""


@dataclass(frozen=True)
class Capture:
    """What was kept of one output stream.

    ``head`` is the first bytes written, ``tail`` the last bytes written after the head (the two
    never overlap), and ``dropped_bytes`` what was between them: ``total_bytes ==
    len(head) + len(tail) + dropped_bytes``, and ``head + tail`` is the whole output when
    nothing was dropped.
    """

    head: bytes = b""
    tail: bytes = b""
    total_bytes: int = 0
    dropped_bytes: int = 0

    def __post_init__(self) -> None:
        if self.dropped_bytes != self.total_bytes - len(self.head) - len(self.tail) or (
            self.dropped_bytes < 0
        ):
            raise InvalidInputError("a capture's byte counts do not add up")

    @property
    def truncated(self) -> bool:
        return self.dropped_bytes > 0

    def cut(self, room: int) -> tuple[bytes, bytes]:
        """At most ``room`` bytes: the whole output if it fits, else a head and a tail of about
        half each, neither cut inside a UTF-8 code point. What lies between is
        ``[len(head), total_bytes - len(tail))``."""
        room = max(0, room)
        heads, tails = self.head, self.tail
        if not self.truncated:
            if self.total_bytes <= room:
                return self.head + self.tail, b""
            heads = tails = self.head + self.tail  # one run of bytes: cut it in two
        tail_take = min(len(tails), room // 2)
        head_take = min(len(heads), room - tail_take)
        tail_take = min(len(tails), room - head_take)
        head = heads[: _whole_end(heads, head_take)]
        tail = tails[len(tails) - tail_take :]
        return head, tail[_whole_start(tail) :]

    def excerpt(self, limit_bytes: int) -> bytes:
        """At most ``limit_bytes``: head, a marker naming how many bytes were left out, tail."""
        if limit_bytes <= 0:
            return b""
        if self.dropped_bytes == 0 and self.total_bytes <= limit_bytes:
            return self.head + self.tail
        # Size the marker for the largest count it could name, so the real one always fits.
        budget = limit_bytes - len(_omitted_marker(self.total_bytes))
        if budget <= 0:
            return self.head[:limit_bytes]
        head, tail = self.cut(budget)
        return head + _omitted_marker(self.total_bytes - len(head) - len(tail)) + tail


def _omitted_marker(omitted_bytes: int) -> bytes:
    return f"\n[... {omitted_bytes} bytes omitted ...]\n".encode()


def drop_marker(drop: Drop) -> bytes:
    """What a stored result holds where bytes were dropped: the drop, stated in words."""
    return f"\n[... {drop.statement()} ...]\n".encode()


def _sequence_length(lead: int) -> int:
    if lead < 0xC0:
        return 1  # ASCII, or a stray continuation byte: not the start of a longer sequence
    if lead < 0xE0:
        return 2
    if lead < 0xF0:
        return 3
    return 4 if lead < 0xF8 else 1


def _whole_end(data: bytes, end: int) -> int:
    """The greatest position <= ``end`` such that ``data[:position]`` does not end inside a
    UTF-8 code point (the bytes after ``end`` need not be known)."""
    for back in range(1, min(4, end) + 1):
        byte = data[end - back]
        if byte & 0xC0 != 0x80:
            return end - back if _sequence_length(byte) > back else end
    return end  # no lead byte near the end: not UTF-8, cut anywhere


def _whole_start(data: bytes) -> int:
    """Where the first code point that starts in ``data`` starts (at most 3 bytes in)."""
    start = 0
    while start < min(3, len(data)) and data[start] & 0xC0 == 0x80:
        start += 1
    if start == len(data) or data[start] & 0xC0 != 0x80:
        return start
    return 0  # four continuation bytes in a row: not UTF-8, keep them all


def share(totals: Sequence[int], budget: int) -> tuple[int, ...]:
    """How many bytes each stream may keep of ``budget``, given how many each wrote.

    Water-filling: every stream keeps ``min(total, level)`` for the highest level whose sum
    stays within the budget, so a stream that needs less than an even share keeps all of it.
    The shares sum to ``min(budget, sum(totals))``. As any total grows, the level only falls:
    a stream over its share never regains room, which is what lets a capture drop bytes as it
    goes and still end exactly at the final shares.
    """
    budget = max(0, budget)
    if sum(totals) <= budget:
        return tuple(totals)
    shares = [0] * len(totals)
    left = budget
    pending = sorted(range(len(totals)), key=lambda i: totals[i])
    while pending:
        level, extra = divmod(left, len(pending))
        index = pending[0]
        if totals[index] <= level:
            shares[index] = totals[index]
            left -= totals[index]
            pending.pop(0)
            continue
        # Everyone left is over the level: an even split, the odd bytes to the first streams.
        for rank, i in enumerate(sorted(pending)):
            shares[i] = level + (1 if rank < extra else 0)
        break
    return tuple(shares)


class _Kept:
    """One stream: all of it in ``head`` until it first goes over its share; from then on a
    head that only shrinks and a tail that follows the newest bytes."""

    __slots__ = ("cut", "head", "tail", "total")

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.cut = False

    def kept(self) -> int:
        return len(self.head) + len(self.tail)

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        (self.tail if self.cut else self.head).extend(data)

    def shrink_to(self, room: int) -> None:
        if self.kept() <= room:
            return
        tail_room = room // 2
        if not self.cut:
            self.cut = True
            self.tail = bytearray(self.head[len(self.head) - tail_room :] if tail_room else b"")
            del self.head[room - tail_room :]
            return
        # Shares only fall once a stream is over its share, so the head is at least the half it
        # keeps, and the tail (which only grows) at least its half.
        head_room = min(len(self.head), room - tail_room)
        del self.head[head_room:]
        excess = len(self.tail) - (room - head_room)
        if excess > 0:
            # Deleting from the front of a bytearray is cheap: CPython moves its start.
            del self.tail[:excess]

    def capture(self) -> Capture:
        kept = self.kept()
        return Capture(bytes(self.head), bytes(self.tail), self.total, self.total - kept)


class CaptureBuffer:
    """Keeps at most ``limit`` bytes of a process's stdout and stderr together, shared out by
    :func:`share` as they are written, and counts every byte."""

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise InvalidInputError("a capture limit must not be negative")
        self._limit = limit
        self._streams = (_Kept(), _Kept())

    def feed_stdout(self, data: bytes) -> None:
        self._feed(0, data)

    def feed_stderr(self, data: bytes) -> None:
        self._feed(1, data)

    def _feed(self, index: int, data: bytes) -> None:
        streams = self._streams
        streams[index].feed(data)
        if streams[0].kept() + streams[1].kept() <= self._limit:
            return
        for stream, room in zip(
            streams, share((streams[0].total, streams[1].total), self._limit), strict=True
        ):
            stream.shrink_to(room)

    def stdout(self) -> Capture:
        return self._streams[0].capture()

    def stderr(self) -> Capture:
        return self._streams[1].capture()


def _marker_room(stream: str, capture: Capture) -> int:
    # The longest marker this stream could need: no count or position exceeds its total.
    n = capture.total_bytes
    return len(drop_marker(Drop(stream, 0, max(1, n)))) + len(f"{n:,}")


def envelope(stdout: Capture, stderr: Capture, limit_bytes: int) -> tuple[bytes, tuple[Drop, ...]]:
    """The stored text of a process's output, at most ``limit_bytes`` when the limit leaves
    room for the markers, and what it is missing.

    The text is stdout, then -- only if the process wrote to stderr -- :data:`STDERR_SEPARATOR`
    and stderr. A stream kept whole is there byte for byte; a stream that had to be cut keeps
    its head and its tail with a marker between them that states the drop (how many bytes of
    which stream, between which byte positions), and the drop is returned too. No cut falls
    inside a UTF-8 code point.
    """
    parts = [(STDOUT, stdout)] + ([(STDERR, stderr)] if stderr.total_bytes else [])
    separator = STDERR_SEPARATOR if len(parts) == 2 else b""
    whole = all(not c.truncated for _, c in parts)
    if whole and sum(c.total_bytes for _, c in parts) + len(separator) <= limit_bytes:
        return stdout.head + stdout.tail + separator + stderr.head + stderr.tail, ()
    room = limit_bytes - len(separator) - sum(_marker_room(s, c) for s, c in parts)
    shares = share([c.total_bytes for _, c in parts], room)
    pieces: list[bytes] = []
    drops: list[Drop] = []
    for (stream, capture), part_room in zip(parts, shares, strict=True):
        if pieces:
            pieces.append(separator)
        head, tail = capture.cut(part_room)
        pieces.append(head)
        if len(head) + len(tail) < capture.total_bytes:
            drop = Drop(stream, len(head), capture.total_bytes - len(tail))
            drops.append(drop)
            pieces += (drop_marker(drop), tail)
    return b"".join(pieces), tuple(drops)


def excerpt(stdout: Capture, stderr: Capture, limit_bytes: int) -> tuple[bytes, bool]:
    """A view of both streams (stderr after :data:`STDERR_SEPARATOR`, only if not empty), at
    most ``limit_bytes``, and whether it left anything out. Wherever it does, a marker says how
    many bytes (when the limit has room for the markers: a few dozen bytes)."""
    parts = [stdout] + ([stderr] if stderr.total_bytes else [])
    separator = STDERR_SEPARATOR if len(parts) == 2 else b""
    whole = all(not c.truncated for c in parts)
    if whole and sum(c.total_bytes for c in parts) + len(separator) <= limit_bytes:
        return stdout.head + stdout.tail + separator + stderr.head + stderr.tail, False
    room = limit_bytes - len(separator) - sum(len(_omitted_marker(c.total_bytes)) for c in parts)
    if room < 0:
        return stdout.excerpt(limit_bytes), True  # no room to say more
    pieces: list[bytes] = []
    for capture, part_room in zip(parts, share([c.total_bytes for c in parts], room),
                                  strict=True):
        if pieces:
            pieces.append(separator)
        head, tail = capture.cut(part_room)
        pieces.append(head)
        if len(head) + len(tail) < capture.total_bytes:
            omitted = capture.total_bytes - len(head) - len(tail)
            pieces += (_omitted_marker(omitted), tail)
    return b"".join(pieces), True
