"""The command group, and how a command runs its coroutine: the one ``asyncio.run``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar
from urllib.parse import quote, urlsplit, urlunsplit

import click
from rich.console import Console

from tidings import __version__
from tidings.errors import TidingsError

T = TypeVar("T")
console = Console()


def run(main: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine; a failure the user can act on becomes a one-line error."""
    try:
        return asyncio.run(main())  # type: ignore[arg-type]
    except TidingsError as exc:
        raise click.ClickException(f"{exc.code}: {exc.message}") from None
    except OSError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from None


def redact(url: str) -> str:
    """A database URL without its password, for logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    user = quote(parts.username or "")
    netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


@click.group()
@click.version_option(__version__, prog_name="tidings")
def main() -> None:
    """tidings: the durable kernel of an LLM-agent runtime."""
