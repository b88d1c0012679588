"""docs/cli.md's examples, read and run as written: a section's shell commands (with the
page's placeholders put back to the test's own server, token and ids) and what it shows them
printing."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from pathlib import Path

CLI_DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def cli_section(heading: str) -> tuple[list[str], list[str]]:
    """The commands of the first shell block under ``## heading``, and the lines of the plain
    block after it (what they print; empty when there is none)."""
    section = CLI_DOC.read_text("utf-8").split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(sh)?\n(.*?)```", section, re.S)
    commands = next(text for kind, text in blocks if kind == "sh").splitlines()
    printed = next((text for kind, text in blocks if not kind), "").splitlines()
    return commands, printed


def arguments(line: str, written: Mapping[str, str]) -> list[str]:
    """A documented ``tidings …`` line's arguments, each placeholder replaced."""
    program, *rest = [written.get(a, a) for a in shlex.split(line)]
    assert program == "tidings", line
    return rest


__all__ = ("CLI_DOC", "arguments", "cli_section")
