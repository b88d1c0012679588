"""The base of every request body."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class RequestBody(BaseModel):
    """Unknown fields are refused: an input that carries ``origin``, ``authored_by`` or a
    kernel stamp is refused, never silently dropped (M1)."""

    model_config = ConfigDict(extra="forbid")
