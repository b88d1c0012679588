"""What the command line prints of a conversation's text: made safe for a terminal, and folded.

A model's or a process's words never colour the terminal nor move its cursor (:func:`visible`,
:func:`escape`); a tool call is folded to one line (:func:`fold`, :func:`short`), a tool's result
to its first lines (:func:`result_lines`, saying how to see the whole: ``tidings transcript
--full``), and the runtime's own words -- a background task's notice, a child conversation's
reply -- to one line that says what happened (:func:`runtime_summary`).
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping
from typing import Any

from rich.markup import escape as escape_markup

from tidings.types import Origin

FOLD_CHARS = 100
"""A folded line (a tool call's arguments, a tool's result, a notice) is cut here."""


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """``text`` with every control character but line breaks and tabs written out (``\\x1b``):
    what a model or a process wrote can colour nothing, move no cursor, clear no screen."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text.replace("\r\n", "\n"))


def escape(text: str) -> str:
    """Text from the feed, safe inside rich markup and on a terminal."""
    return escape_markup(visible(text))


def fold(text: str, limit: int = FOLD_CHARS) -> str:
    """The first line of ``text``, at most ``limit`` characters, saying what was left out."""
    lines = text.strip().splitlines() or [""]
    first = lines[0]
    rest = len(lines) - 1
    if len(first) > limit:
        first = first[: limit - 1] + "…"
    elif rest:
        first += " …"
    return first + (f" (+{rest} lines)" if rest else "")


RESULT_LINES = 8
"""A tool's result shows its first lines, this many at most, each cut at ``RESULT_CHARS``;
``tidings transcript --full`` (and ``--json``) shows it whole."""

RESULT_CHARS = 200

WHOLE_HINT = "tidings transcript --full shows it whole"


def result_lines(text: str, *, full: bool = False) -> tuple[list[str], int]:
    """A tool's result as the lines to show, and how many lines were left out (``-1``: none
    left out, but a line was cut). ``full``: every line, whole."""
    lines = text.strip("\n").splitlines() or [""]
    if full:
        return lines, 0
    shown = [line if len(line) <= RESULT_CHARS else line[: RESULT_CHARS - 1] + "…"
             for line in lines[:RESULT_LINES]]
    left = len(lines) - len(shown)
    return shown, left or (-1 if shown != lines[:RESULT_LINES] else 0)


def short(value: Any, limit: int = FOLD_CHARS) -> str:
    """``value`` (a tool call's arguments, an answer) as JSON on one line, cut at ``limit``."""
    text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


_FACTS = re.compile(r"<process_facts>(.*?)</process_facts>", re.S)
_OUTPUT = re.compile(r"<untrusted_process_output[^>]*>(.*?)</untrusted_process_output>", re.S)
_CHILD = re.compile(
    r'^<task_result task="([^"]*)" status="([^"]*)" conversation="([^"]*)">(.*)</task_result>$',
    re.S)


def runtime_summary(content: str) -> str:
    """One line for the runtime's own words: a task's notice, a child's reply, or else the
    first line of what it said."""
    facts = _FACTS.search(content)
    if facts is not None:
        try:
            observed = json.loads(facts.group(1))
        except ValueError:
            observed = None
        if isinstance(observed, dict):
            how = [f"exit {observed['exit_code']}" if observed.get("exit_code") is not None
                   else f"signal {observed['signal']}" if observed.get("signal") else "",
                   f"{observed['duration_ms'] / 1000:.1f} s"
                   if isinstance(observed.get("duration_ms"), int | float) else ""]
            line = f"task {observed.get('task_key', '?')} {observed.get('state', 'ended')}"
            if any(how):
                line += f" ({', '.join(h for h in how if h)})"
            output = _OUTPUT.search(content)
            if output is not None:
                try:
                    text = json.loads(output.group(1))
                except ValueError:
                    text = None
                if isinstance(text, str) and text.strip():
                    line += ": " + fold(text)
            return line
    child = _CHILD.match(content.strip())
    if child is not None:
        task, status, conversation, body = child.groups()
        line = f"child {html.unescape(conversation)} ({html.unescape(task)}) {status}"
        body = html.unescape(body)
        return line + (": " + fold(body) if body.strip() else "")
    return fold(content)


def by_runtime(message: Mapping[str, Any]) -> bool:
    """Whether a message is the runtime's own words; the feed says so (``by_runtime``), a
    transcript's message by its kernel origin."""
    if "by_runtime" in message:
        return bool(message["by_runtime"])
    try:
        return Origin(str(message.get("origin"))).is_kernel
    except ValueError:
        return False


__all__ = ("FOLD_CHARS", "RESULT_CHARS", "RESULT_LINES", "WHOLE_HINT", "by_runtime", "escape",
           "fold", "result_lines", "runtime_summary", "short", "visible")
