"""The master key: the runtime waits for it, it is missing or malformed, or a sealed result
does not open under it."""

from __future__ import annotations

from tidings.errors.base import TidingsError


class RuntimeLockedError(TidingsError):
    """The runtime started locked and waits for its master key; nothing was written."""

    code = "runtime_locked"

    def __init__(self) -> None:
        super().__init__("the runtime is locked until its master key is unlocked")


class MasterKeyError(TidingsError):
    """The master key is missing or malformed; results cannot be sealed or opened."""

    code = "master_key_unavailable"


class ResultCorruptError(TidingsError):
    """A stored envelope failed authentication: it was altered or sealed under another key."""

    code = "result_corrupt"
