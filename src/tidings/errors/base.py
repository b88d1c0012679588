"""The root of every failure a caller can act on.

Each subclass carries a stable ``code`` (used by the HTTP layer as the problem type and by the
command line as its message key) and structured attributes, not just a string. A class's
docstring is its default message.
"""

from __future__ import annotations


class TidingsError(Exception):
    """tidings could not do what was asked."""

    code: str = "tidings_error"

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (type(self).__doc__ or "").strip())

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""
