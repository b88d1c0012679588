"""A program run on a real terminal: a pseudo-terminal from the standard library, whose far end
is the program's controlling terminal -- so Ctrl-C typed there is the terminal's interrupt
(SIGINT to the program's foreground process group), as a person's would be.

What the program prints is read as it comes, in a thread; every read is kept, so a test can see
that an answer grew over several reads rather than arriving at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import signal
import struct
import subprocess
import termios
import threading
from collections.abc import Mapping, Sequence

from tests.waiting import wait_for_output

WAIT_S = 30.0  # a bound on waiting for something the test arranged; never asserted on

_CONTROL = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: styles, erasing a line, moving the cursor
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC: a window title, a link
    r"|\x1b[()][0-9A-Za-z]")  # character sets


def plain(text: str) -> str:
    """What a person reads: terminal control sequences and carriage returns taken out."""
    return _CONTROL.sub("", text).replace("\r", "")


def _take_terminal() -> None:
    """In the child, after ``setsid``: make the terminal on stdin the controlling one."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """``argv`` on a pseudo-terminal of ``columns`` x ``rows``."""

    def __init__(self, argv: Sequence[str], *, env: Mapping[str, str], columns: int = 200,
                 rows: int = 50) -> None:
        master, child_end = os.openpty()
        fcntl.ioctl(child_end, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        self._master = master
        self.process = subprocess.Popen(
            list(argv), stdin=child_end, stdout=child_end, stderr=child_end, env=dict(env),
            start_new_session=True, preexec_fn=_take_terminal,
        )
        os.close(child_end)
        self.reads: list[str] = []
        """Every read from the terminal, as the program wrote it."""
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._ended = False
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        while True:
            try:
                chunk = os.read(self._master, 65536)
            except OSError:  # EIO: the program's end of the terminal is closed
                chunk = b""
            with self._arrived:
                if not chunk:
                    self._ended = True
                    self._arrived.notify_all()
                    return
                self.reads.append(chunk.decode("utf-8", "replace"))
                self._arrived.notify_all()

    @property
    def screen(self) -> str:
        """Everything shown so far, as plain text."""
        with self._lock:
            return plain("".join(self.reads))

    def mark(self) -> int:
        """A position in :attr:`screen`: :meth:`wait_for` can look only after it."""
        return len(self.screen)

    def wait_for(self, pattern: str, *, after: int = 0, within_s: float = WAIT_S
                 ) -> re.Match[str]:
        """The first match of ``pattern`` in what was shown after ``after``."""
        regex = re.compile(pattern, re.M)

        def tail() -> str:
            shown = plain("".join(self.reads))
            return "the screen ends with:\n" + shown[max(after, len(shown) - 3000):]

        return wait_for_output(
            self._arrived, lambda: regex.search(plain("".join(self.reads)), after),
            ended=lambda: self._ended, what=f"{pattern!r} shown", within_s=within_s, shown=tail)

    def type(self, text: str) -> None:
        """Keys typed at the terminal (a line ends with ``\\n``: Enter)."""
        os.write(self._master, text.encode())

    def type_and_see(self, keys: str, *patterns: str) -> list[re.Match[str]]:
        """Type ``keys``, then wait for each of ``patterns`` in what is shown after they were
        typed; the matches."""
        mark = self.mark()
        self.type(keys)
        return [self.wait_for(pattern, after=mark) for pattern in patterns]

    def ctrl_c(self) -> None:
        self.type("\x03")

    def ctrl_d(self) -> None:
        self.type("\x04")

    def wait(self, within_s: float = WAIT_S) -> int:
        """The program's exit status, once it has ended."""
        return self.process.wait(within_s)

    def close(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(WAIT_S)
        self._thread.join(WAIT_S)
        os.close(self._master)


__all__ = ("Terminal", "plain")
