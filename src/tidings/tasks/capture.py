"""Bounded capture of a process's output stream: the head and the tail kept, every byte counted.

However much a process writes, a capture holds at most twice its limit; what lies between the
head and the tail is counted in ``dropped_bytes`` and named in an excerpt's marker.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidings.errors import InvalidInputError


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
        tail_take = min(len(self.tail), budget // 2)
        head_take = min(len(self.head), budget - tail_take)
        tail_take = min(len(self.tail), budget - head_take)
        omitted = self.total_bytes - head_take - tail_take
        tail = self.tail[len(self.tail) - tail_take :]
        return self.head[:head_take] + _omitted_marker(omitted) + tail


def _omitted_marker(omitted_bytes: int) -> bytes:
    return f"\n[... {omitted_bytes} bytes omitted ...]\n".encode()


class CaptureBuffer:
    """Keeps the first and the last ``limit`` bytes fed to it, and counts all of them."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._head = bytearray()
        self._tail = bytearray()
        self._total = 0

    def feed(self, data: bytes) -> None:
        self._total += len(data)
        view = memoryview(data)
        room = self._limit - len(self._head)
        if room > 0:
            self._head += view[:room]
            view = view[room:]
        if not view:
            return
        if len(view) >= self._limit:
            self._tail = bytearray(view[len(view) - self._limit :])
            return
        self._tail += view
        excess = len(self._tail) - self._limit
        if excess > 0:
            # Deleting from the front of a bytearray is cheap: CPython moves its start.
            del self._tail[:excess]

    def capture(self) -> Capture:
        kept = len(self._head) + len(self._tail)
        return Capture(bytes(self._head), bytes(self._tail), self._total, self._total - kept)
