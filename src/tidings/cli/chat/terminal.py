"""The chat's terminal, from outside the event loop: the person's lines, read in a thread of
their own (a blocking read cannot be interrupted, and the thread must never hold the process at
exit), and log records printed as lines of the chat. Both hand what they have to the loop;
everything else runs on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys

from tidings.cli.screen import Screen
from tidings.cli.text import escape


def read_lines(loop: asyncio.AbstractEventLoop, lines: asyncio.Queue[str | None]) -> None:
    """The person's lines, then None at the end of input (the thread then ends). A terminal's
    end of input (Ctrl-D) is None too, but the terminal is read on: the chat may ask whether
    to quit.

    It reads the file descriptor itself, not ``sys.stdin``: a buffered reader's lock, held by a
    read that never returns, would stop the interpreter from finishing at exit.
    """
    pending = b""
    try:
        terminal = os.isatty(sys.stdin.fileno())
    except (OSError, ValueError):
        terminal = False
    while True:
        try:
            chunk = os.read(sys.stdin.fileno(), 4096)
            ended = not chunk and not terminal
        except (OSError, ValueError):  # no standard input (closed, or none at all)
            chunk, ended = b"", True
        pending += chunk
        *complete, pending = pending.split(b"\n") if chunk else [pending, b""]
        said: list[str | None] = [c.decode("utf-8", "replace").rstrip("\r")
                                  for c in complete if chunk or c]
        if not chunk:
            said.append(None)
        try:
            for line in said:
                loop.call_soon_threadsafe(lines.put_nowait, line)
        except RuntimeError:  # the loop is closed: the chat is over
            return
        if ended:
            return


class ScreenLog(logging.Handler):
    """The embedded runtime's warnings, printed as lines of the chat (never over its text)."""

    def __init__(self, screen: Screen, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(logging.WARNING)
        self.screen = screen
        self.loop = loop

    def emit(self, record: logging.LogRecord) -> None:
        line = f"[dim]\\[log] {escape(record.levelname.lower())}: {escape(record.getMessage())}[/]"
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.screen.line, line)


__all__ = ("ScreenLog", "read_lines")
