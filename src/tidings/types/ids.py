"""Identifiers: one ``NewType`` per kind of id, :func:`new_id` (ids that sort by creation
time), and ``JSON``, the type of a value that round-trips through JSON."""

from __future__ import annotations

import os
import time
from typing import Any, NewType

ConversationId = NewType("ConversationId", str)
EventId = NewType("EventId", str)
OperationId = NewType("OperationId", str)
InstanceId = NewType("InstanceId", str)
DeliveryId = NewType("DeliveryId", int)
RunId = NewType("RunId", str)
InputId = NewType("InputId", str)
MessageId = NewType("MessageId", str)

JSON = Any
"""A value that round-trips through :func:`json.dumps` (objects, arrays, strings, numbers)."""


def new_id(prefix: str) -> str:
    """A unique id that sorts by creation time (like UUIDv7): nanoseconds, then 64 random bits.

    Time order keeps the unique indexes on ids appending at their right edge instead of writing
    all over them, which is most of the cost of an insert on PostgreSQL.
    """
    # os.urandom(8).hex() is what secrets.token_hex(8) returns, without its two calls.
    return f"{prefix}_{time.time_ns():016x}{os.urandom(8).hex()}"
