"""``tidings mcp login NAME``: authorize tidings, once, for an MCP server behind OAuth.

The server is the config file's ``[mcp.NAME]`` (with its ``[mcp.NAME.oauth]`` table). The
login prints the authorization URL to open in a browser, waits on the declared loopback
redirect URI for the code, and keeps the tokens sealed under the master key in the database;
``tidings serve`` on that database then uses them and refreshes them as they expire.
"""

from __future__ import annotations

from datetime import timedelta

import click

from tidings import MasterKey, MasterKeyError
from tidings.cli.app import console, main, redact
from tidings.cli.app import run as run_async
from tidings.cli.serve import _load_settings


@main.group()
def mcp() -> None:
    """MCP servers of a config file."""


@mcp.command()
@click.argument("name")
@click.option("--config", "config_path", required=True, metavar="FILE",
              type=click.Path(dir_okay=False, exists=True),
              help="The tidings.toml that declares the server ([mcp.NAME.oauth]).")
@click.option("--database", default=None, envvar="TIDINGS_DATABASE",
              help="Where the tokens are kept [default: the config file's, else tidings.db].")
@click.option("--wait", "wait_s", default=300, show_default=True, type=click.IntRange(1),
              help="Seconds to wait for the browser to come back.")
def login(name: str, config_path: str, database: str | None, wait_s: int) -> None:
    """Authorize tidings for the MCP server NAME (OAuth authorization code, in a browser)."""
    from tidings.mcp.login import login as log_in  # the SDK, only for this command

    settings = _load_settings(config_path)
    assert settings is not None
    spec = next((s for s in settings.mcp_servers if s.name == name), None)
    if spec is None:
        raise click.ClickException(f"invalid_input: {config_path} declares no [mcp.{name}]")
    try:
        master_key = MasterKey.from_environment()
    except MasterKeyError as exc:
        raise click.ClickException(
            f"{exc.code}: the tokens are kept sealed under the master key, and none is given "
            f"({exc.message})") from None
    database = database or settings.database or "tidings.db"

    def say(url: str) -> None:
        console.print(f"Open this URL in a browser to authorize tidings for MCP server {name}:")
        click.echo(url)  # on a line of its own, unwrapped, for a person or a program to take

    tools = run_async(lambda: log_in(spec.server(), database, master_key, say=say,
                                     within=timedelta(seconds=wait_s)))
    console.print(f"authorized: MCP server {name} lists {tools} tools; its tokens are kept "
                  f"sealed in {redact(database)}")


__all__ = ("login", "mcp")
