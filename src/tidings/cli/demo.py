"""``tidings demo``: the whole mission end to end, offline; and its restart child."""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from tidings.cli.app import console, main
from tidings.cli.app import run as run_async


@main.command()
@click.option("--database", default=None,
              help="Database URL (default: a new SQLite file in a temporary folder).")
def demo(database: str | None) -> None:
    """Run the whole story end to end, offline, on a SQLite file of its own; end with checks
    read back from the database."""
    from tidings.demo import run_demo

    # Piped (into a file, a pager, a test), a line stays one line: wrapped at a width no one
    # reads it at, words would be split.
    out = console if console.is_terminal else Console(soft_wrap=True)
    if database is None:
        with tempfile.TemporaryDirectory(prefix="tidings-demo-") as folder:
            ok = run_async(lambda: run_demo(str(Path(folder) / "demo.db"), out))
    else:
        ok = run_async(lambda: run_demo(database, out))
    if not ok:
        sys.exit(1)


@main.command("demo-child", hidden=True)
@click.argument("database")
@click.argument("conversation")
@click.option("--crash", is_flag=True)
def demo_child(database: str, conversation: str, crash: bool) -> None:
    """The demo's restart phase, in a process of its own (started by ``tidings demo``)."""
    from tidings.demo import restart_child

    def report(facts: Mapping[str, Any]) -> None:
        click.echo(json.dumps(dict(facts)))
        sys.stdout.flush()

    run_async(lambda: restart_child(database, conversation, crash=crash, report=report))
