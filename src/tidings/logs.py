"""Structured logs (A6): one JSON object per line, for a log shipper to read.

::

    {"ts": "2025-01-31T12:00:00.123456Z", "level": "INFO", "logger": "tidings.runtime",
     "message": "...", "conversation_id": "conv_..."}

Fields passed with ``extra=`` become top-level keys; an exception becomes ``exc_info`` (its
formatted traceback) and ``exc_type``.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

LOG_FORMAT_ENV = "TIDINGS_LOG_FORMAT"

# The attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD = frozenset(
    vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None)).keys()
    | {"message", "asctime", "taskName", "color_message"}  # uvicorn's ANSI-coloured twin
)


class JsonFormatter(logging.Formatter):
    """Formats a record as one line of JSON: ts, level, logger, message, then extra fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="microseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_") and key not in entry:
                entry[key] = value
        if record.exc_info and record.exc_info[0] is not None:
            entry["exc_type"] = record.exc_info[0].__name__
            entry["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack_info"] = self.formatStack(record.stack_info)
        # default=str: an extra field that is not JSON (a Path, an enum) still logs.
        return json.dumps(entry, ensure_ascii=False, default=str)


def json_logs_requested(flag: bool) -> bool:
    """``--json-logs``, or ``TIDINGS_LOG_FORMAT=json`` in the environment."""
    return flag or os.environ.get(LOG_FORMAT_ENV, "").strip().lower() == "json"


def configure_logging(
    *, json_format: bool, level: int = logging.INFO, stream: TextIO | None = None
) -> logging.Handler:
    """Give the root logger one handler (to stderr by default): JSON lines or plain text.

    Replaces the root's handlers, so calling it twice does not duplicate lines. Returns the
    handler it installed.
    """
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(
        JsonFormatter() if json_format
        else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    return handler
