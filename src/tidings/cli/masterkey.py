"""What ``tidings serve`` says about the results' master key at start (B7).

Without a master key the runtime runs, but keeps no results: a serve that started that way
says so once, on stderr, before it serves; ``--require-master-key`` refuses to start instead.
"""

from __future__ import annotations

import logging
import os

import click

from tidings import MasterKey, MasterKeyError

log = logging.getLogger("tidings.cli")

HOW_TO_GIVE = (
    "Give one in TIDINGS_MASTER_KEY (32 bytes as 64 hex digits or base64, e.g. the output of "
    "`python -c 'import secrets; print(secrets.token_hex(32))'`) or in a file named by "
    "TIDINGS_MASTER_KEY_FILE, or start with --locked and post it to /v1/unlock."
)

WITHOUT_A_KEY = (
    "no master key is set, so results are not kept: background output is not stored",
    "to keep them, set TIDINGS_MASTER_KEY: see docs/cli.md#the-master-key",
)
"""Two short lines: what is not kept, and where the docs say how to give a key."""


def master_key_known() -> bool:
    """Whether the environment gives a master key (a malformed one is an error, not none)."""
    if not (os.environ.get("TIDINGS_MASTER_KEY") or os.environ.get("TIDINGS_MASTER_KEY_FILE")):
        return False
    try:
        MasterKey.from_environment()
    except MasterKeyError as exc:
        raise click.ClickException(f"{exc.code}: {exc.message}") from None
    return True


def check_master_key(*, required: bool, locked: bool) -> None:
    """Refuse to start (``required``) or say what is not kept, when no key is given: two
    short warning lines on stderr, through the log (a JSON line with ``--json-logs``).

    A locked serve waits for its key (given through /v1/unlock) and says nothing here.
    """
    if locked or master_key_known():
        return
    if required:
        raise click.ClickException(
            "--require-master-key: no master key is set; refusing to start. " + HOW_TO_GIVE)
    for line in WITHOUT_A_KEY:
        log.warning(line)


__all__ = ("WITHOUT_A_KEY", "check_master_key", "master_key_known")
