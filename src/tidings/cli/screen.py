"""The terminal as ``tidings chat`` and ``tidings transcript`` use it: whole lines of rich
markup, one streamed line (the agent's answer as it comes), and the chat's prompt -- never one
printed over another. What is shown on it, and how, is :mod:`tidings.cli.render`'s.
"""

from __future__ import annotations

from rich.console import Console

from tidings.cli.text import escape, visible


class Screen:
    """The terminal as the chat uses it: whole lines, one streamed line, and the prompt.

    Whatever is printed while the prompt is shown first takes the prompt's line (and the
    prompt is shown again after it by the chat); a streamed answer stays on its line until it
    is committed, discarded, or something else must be printed.
    """

    def __init__(self, console: Console, *, prompt: str = "you> ") -> None:
        self.console = console
        self.prompt_text = prompt
        self.prompt_shown = False
        self.streaming: tuple[str, int] | None = None

    def _write(self, text: str) -> None:
        self.console.file.write(text)
        self.console.file.flush()

    def _take_line(self) -> None:
        if self.prompt_shown:
            self._write("\r\x1b[2K" if self.console.is_terminal else "\n")
            self.prompt_shown = False

    def end_stream(self) -> None:
        if self.streaming is not None:
            self._write("\n")
            self.streaming = None

    def line(self, markup: str) -> None:
        """Print one line of rich markup (its parts from elsewhere escaped by the caller)."""
        self._take_line()
        self.end_stream()
        self.console.print(markup, highlight=False, soft_wrap=True)

    def stream(self, key: tuple[str, int], header: str, text: str) -> None:
        """Append ``text`` to the streamed line of ``key`` (opened with ``header``)."""
        self._take_line()
        if self.streaming != key:
            self.end_stream()
            self.console.print(header, end="", highlight=False)
            self.streaming = key
        self.console.print(visible(text), end="", markup=False, highlight=False,
                           soft_wrap=True)

    def broken(self) -> None:
        """The terminal wrote on the current line itself (``^C``): end it."""
        if self.streaming is not None:
            self.end_stream()
        elif not self.prompt_shown:
            self._write("\n")

    def prompt(self) -> None:
        if not self.prompt_shown:
            self.end_stream()
            self.console.print(f"[bold green]{escape(self.prompt_text)}[/]", end="",
                               highlight=False)
            self.prompt_shown = True

    def typed(self, echo: str | None = None) -> None:
        """The person ended a line at the prompt: the cursor is on a new line. ``echo``: the
        line, when no terminal showed it as it was typed (input from a pipe)."""
        if echo is not None:
            if not self.prompt_shown:
                self.prompt()
            self.console.print(visible(echo), markup=False, highlight=False, soft_wrap=True)
        self.prompt_shown = False


__all__ = ("Screen",)
